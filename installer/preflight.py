"""Preflight: everything that would stop or change an install, found at once, before anything changes.

Pure: the node facts, the chosen target, the installed versions and the answers to the node
requirements are passed in (:mod:`installer.install` asks the backend for them), so every rule
here is tested with plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Dict, List, Mapping, Optional, Set, Tuple

from installer.target import Requirement, StagedPackage, StagedTarget
from plumbing.errors import ExitCode, ProblemsFound

#: Packages of the old nvidia-docker world that a toolkit install should talk about.
LEGACY_PACKAGES = (
    "nvidia-docker2",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-docker",
)

#: Unpacked size is not in the manifest; a package's files plus dpkg/rpm's own copies fit in 3x.
DISK_FACTOR = 3

Compare = Callable[[str, str], int]


class PreflightFailed(ProblemsFound):
    """The node does not meet the bundle's requirements; ``problems`` lists every reason."""

    exit_code = ExitCode.PREFLIGHT


@dataclass
class Preflight:
    """The outcome of the checks and the plan that follows from them."""

    problems: List[str] = field(default_factory=list)  #: blocking; empty means go
    to_install: List[StagedPackage] = field(default_factory=list)  #: in the target's order
    already: List[str] = field(default_factory=list)  #: names already at the bundle's version
    downgrades: List[Tuple[str, str, str]] = field(default_factory=list)  #: (name, installed, bundle)
    remove_first: List[Tuple[str, str, str]] = field(default_factory=list)  #: (name, version, why)
    notes: List[str] = field(default_factory=list)
    #: (upgrade|downgrade, name, installed, bundle), worded by :meth:`change_lines` for a plan or a done run
    changes: List[Tuple[str, str, str, str]] = field(default_factory=list)
    needed_bytes: int = 0

    def change_lines(self, done: bool) -> List[str]:
        """``would upgrade X from A to B`` in a dry run, ``upgraded X from A to B`` after the run."""
        return [
            f"{verb}d {name} from {old} to {new}" if done else f"would {verb} {name} from {old} to {new}"
            for verb, name, old, new in self.changes
        ]

    @property
    def nothing_to_do(self) -> bool:
        """Every package is already at the bundle's version and nothing must be removed."""
        return not self.to_install and not self.remove_first and not self.problems

    def raise_for_problems(self) -> None:
        """:raises PreflightFailed: when there is at least one problem."""
        if self.problems:
            raise PreflightFailed("the node is not ready for this bundle", self.problems)


def downgrade_problem(downgrades: List[Tuple[str, str, str]]) -> str:
    """One sentence for every package the bundle would downgrade, with the flag said once."""
    bundled = {new for _, _, new in downgrades}
    if len(bundled) == 1:
        names = ", ".join(f"{name} {old}" for name, old, _ in downgrades)
        verb = "is" if len(downgrades) == 1 else "are"
        newer = f"{names} {verb} newer than the bundle's {bundled.pop()}"
    else:
        newer = ", ".join(f"{name} {old} is newer than the bundle's {new}" for name, old, new in downgrades)
    return f"{newer}; pass --allow-downgrade to install {'it' if len(downgrades) == 1 else 'them'} anyway"


def satisfies(version: str, requirement: Requirement, compare: Compare) -> bool:
    """True when ``version`` of ``requirement.name`` meets its constraint."""
    if not requirement.op or not requirement.version:
        return True
    result = compare(version, requirement.version)
    return {
        "<<": result < 0,
        "<=": result <= 0,
        "=": result == 0,
        ">=": result >= 0,
        ">>": result > 0,
    }[requirement.op]


def check(
    target: StagedTarget,
    *,
    installed: Mapping[str, Optional[str]],
    requirements_met: Mapping[Requirement, bool],
    compare: Compare,
    free_bytes: int,
    allow_downgrade: bool = False,
    root_label: str = "/",
    held: Collection[str] = (),
    allow_held: bool = False,
) -> Preflight:
    """Run every check and build the plan.

    :param target: the bundle target chosen for this node, packages in install order.
    :param installed: installed version (or None) of every target package, legacy package and Breaks name.
    :param requirements_met: the backend's answer for each node requirement of the target.
    :param compare: the node package manager's version comparison.
    :param free_bytes: free space on the filesystem holding the root.
    :param allow_downgrade: install older versions over newer ones.
    :param held: the target packages held on the node (dpkg hold, dnf versionlock).
    :param allow_held: change held packages too (``--allow-held`` or ``--unhold``), as apt's
        ``--allow-change-held-packages``; otherwise a hold stops the run.
    """
    result = Preflight()
    missing = [str(req) for req, ok in requirements_met.items() if not ok]
    for req in missing:
        result.problems.append(f"the node requirement {req} is not installed")

    names = {pkg.name for pkg in target.packages}
    for pkg in target.packages:
        current = installed.get(pkg.name)
        if current is None:
            result.to_install.append(pkg)
            continue
        order = compare(current, pkg.version)
        if order == 0:
            result.already.append(pkg.name)
        elif order < 0:
            result.to_install.append(pkg)
            result.changes.append(("upgrade", pkg.name, current, pkg.version))
        else:
            result.downgrades.append((pkg.name, current, pkg.version))
            result.to_install.append(pkg)
            if allow_downgrade:
                result.changes.append(("downgrade", pkg.name, current, pkg.version))
    if result.downgrades and not allow_downgrade:
        result.problems.append(downgrade_problem(result.downgrades))

    _check_held(result, held, installed, allow_held)
    _plan_legacy(target, names, installed, compare, result)

    result.needed_bytes = sum(pkg.size for pkg in result.to_install) * DISK_FACTOR
    if result.to_install and free_bytes < result.needed_bytes:
        result.problems.append(
            f"only {_mib(free_bytes)} free under {root_label}, the install needs about {_mib(result.needed_bytes)}"
        )
    return result


def _check_held(
    result: Preflight, held: Collection[str], installed: Mapping[str, Optional[str]], allow_held: bool
) -> None:
    """A held package is changed only when the admin says so, as apt and dnf do."""
    changing = [f"{p.name} {installed.get(p.name)}" for p in result.to_install if p.name in held]
    if changing and not allow_held:
        result.problems.append(
            f"{', '.join(changing)} {'is' if len(changing) == 1 else 'are'} held at that version; "
            "pass --allow-held to change the held packages and keep them held, or --unhold to change "
            "them and release the hold"
        )


def _plan_legacy(
    target: StagedTarget,
    names: Set[str],
    installed: Mapping[str, Optional[str]],
    compare: Compare,
    result: Preflight,
) -> None:
    broken: Dict[str, str] = {}
    for pkg in target.packages:
        for rel in pkg.breaks:
            current = installed.get(rel.name)
            if rel.name in names or current is None or rel.name in broken:
                continue
            if satisfies(current, rel, compare):
                broken[rel.name] = current
                why = f"{pkg.name} {pkg.version} breaks {rel}"
                result.remove_first.append((rel.name, current, why))
    for name in LEGACY_PACKAGES:
        current = installed.get(name)
        if current is not None and name not in broken and name not in names:
            result.notes.append(
                f"{name} {current} is a deprecated package that works with this toolkit; it is left in place"
            )


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def names_to_query(target: StagedTarget) -> List[str]:
    """Every package name whose installed version :func:`check` needs."""
    seen: List[str] = []
    for name in [p.name for p in target.packages] + [r.name for p in target.packages for r in p.breaks]:
        if name not in seen:
            seen.append(name)
    seen.extend(n for n in LEGACY_PACKAGES if n not in seen)
    return seen
