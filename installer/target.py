"""The installer's view of a verified, staged bundle: targets, their package files, node requirements.

These records are what :mod:`installer.install` works on. They are built only from a bundle that
has been verified completely (see :mod:`installer.source`), so every ``path`` here points at bytes
whose digest the signed manifest named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Set, Tuple

from plumbing.errors import ExitCode, ToolError

#: The dependency order of the toolkit packages (the library first, the toolkit last).
TOOLKIT_ORDER = (
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
)

_RELATION = re.compile(
    r"^\s*([A-Za-z0-9_.+:\-()/]+?)\s*(?:\(\s*(<<|<=|>=|>>|=|<|>)\s*([^)\s]+)\s*\)|(<<|<=|>=|>>|=|<|>)\s*(\S+))?\s*$"
)
_OPS = {"<": "<<", ">": ">>"}


@dataclass(frozen=True)
class Requirement:
    """One versioned reference: ``libc6 (>= 2.14)`` (deb) or ``glibc >= 2.17`` (rpm).

    ``op`` uses Debian spelling (``<<``, ``<=``, ``=``, ``>=``, ``>>``) or None when unversioned.
    """

    name: str
    op: Optional[str] = None
    version: Optional[str] = None

    @classmethod
    def parse(cls, text: str) -> Requirement:
        """Parse ``name``, ``name (op version)`` or ``name op version``.

        >>> Requirement.parse("libcap2 (>= 1:2.10)")
        Requirement(name='libcap2', op='>=', version='1:2.10')
        """
        match = _RELATION.match(text)
        if not match:
            raise ToolError(f"cannot understand the requirement {text!r} in the bundle manifest")
        name, op1, ver1, op2, ver2 = match.groups()
        op = op1 or op2
        return cls(name=name, op=_OPS.get(op, op) if op else None, version=ver1 or ver2)

    def __str__(self) -> str:
        return f"{self.name} ({self.op} {self.version})" if self.op else self.name


@dataclass(frozen=True)
class StagedPackage:
    """One package file of a target, already verified and copied into the staging directory."""

    name: str
    version: str
    arch: str
    path: Path
    size: int
    depends: Tuple[str, ...] = ()  #: names this package depends on (for the install order)
    breaks: Tuple[Requirement, ...] = ()  #: Breaks/Conflicts/Obsoletes: installed matches must go
    file_digest_algo: Optional[str] = None  #: rpm: its file digest algorithm, as the signed manifest says


@dataclass(frozen=True)
class StagedTarget:
    """The packages of one (format, architecture[, distribution]) in a bundle."""

    name: str
    format: str  #: "deb" or "rpm"
    arch: str
    packages: Tuple[StagedPackage, ...]
    requirements: Tuple[Requirement, ...] = ()
    distro: Optional[str] = None  #: e.g. "rhel" or "ubuntu" when the target is distribution-specific

    def describe(self) -> str:
        """e.g. ``deb/amd64``."""
        return f"{self.format}/{self.arch}" + (f" ({self.distro})" if self.distro else "")


@dataclass(frozen=True)
class StagedBundle:
    """A bundle whose signature and every file digest have been checked."""

    bundle_id: str  #: sha256 of the signed manifest bytes
    signer: str  #: fingerprint of the key that signed it
    release: str  #: the toolkit version the bundle pins
    targets: Tuple[StagedTarget, ...]
    staging_dir: Path
    notes: Tuple[str, ...] = ()  #: what the admin should know about the bundle itself (an older format)
    created: str = ""  #: the build time the signed manifest gives (orders the builds of one release)
    channel: str = "stable"  #: the upstream channel; ``experimental`` carries release candidates
    expires: Optional[str] = None  #: the signed expiry, if the operator set one


def install_order(packages: Sequence[StagedPackage]) -> List[StagedPackage]:
    """Order packages so each comes after the ones it depends on (ties: the known toolkit order).

    >>> [p.name for p in install_order([StagedPackage("nvidia-container-toolkit", "1", "a", Path("x"), 1, ("libnvidia-container1",)), StagedPackage("libnvidia-container1", "1", "a", Path("y"), 1)])]
    ['libnvidia-container1', 'nvidia-container-toolkit']
    """

    def rank(pkg: StagedPackage) -> Tuple[int, str]:
        return (TOOLKIT_ORDER.index(pkg.name) if pkg.name in TOOLKIT_ORDER else -1, pkg.name)

    names = {p.name for p in packages}
    pending = sorted(packages, key=rank)
    done: List[StagedPackage] = []
    placed: Set[str] = set()
    while pending:
        for pkg in pending:
            if all(dep in placed or dep not in names or dep == pkg.name for dep in pkg.depends):
                break
        else:  # a cycle: fall back to the known order rather than refuse
            pkg = pending[0]
        pending.remove(pkg)
        done.append(pkg)
        placed.add(pkg.name)
    return done


def pick_target(
    bundle: StagedBundle, package_format: Optional[str], arch: str, distro_ids: Sequence[str]
) -> StagedTarget:
    """Choose the target matching the node, preferring one made for the node's distribution.

    :raises ToolError: naming what the bundle has and what the node is, when nothing matches.
    """
    matches = [t for t in bundle.targets if t.format == package_format and t.arch == arch]
    for target in matches:
        if target.distro and target.distro in distro_ids:
            return target
    generic = [t for t in matches if not t.distro]
    if generic:
        return generic[0]
    if matches:
        return matches[0]
    has = ", ".join(t.describe() for t in bundle.targets) or "no targets"
    if not package_format:
        raise TargetMismatch(
            f"found neither a dpkg nor an rpm database on this node, and the bundle has {has}"
        )
    node = f"{package_format}/{arch}"
    raise TargetMismatch(f"the bundle has {has} but this node is {node}; build a bundle for {node}")


class TargetMismatch(ToolError):
    """The bundle has nothing for this node's package format and architecture."""

    exit_code = ExitCode.PREFLIGHT
