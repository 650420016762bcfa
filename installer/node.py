"""What kind of node this is: distribution, package manager, architecture, container engines.

The parsing functions are pure (:func:`parse_os_release`, :func:`normalize_arch`); :func:`detect_node`
is the thin loader that reads files under ``--root`` and asks dpkg, rpm or uname for the
architecture through the one subprocess chokepoint (passed in, so tests can script it).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from plumbing.errors import ToolError
from plumbing.fsutil import is_live_root, rooted

#: One name per architecture in each package world: (deb name, rpm name).
_ARCH_PAIRS: Tuple[Tuple[str, str], ...] = (("amd64", "x86_64"), ("arm64", "aarch64"), ("ppc64el", "ppc64le"))

#: Where each package manager keeps its database on a node (node paths, mapped under the root).
DPKG_STATUS = "/var/lib/dpkg/status"
RPM_DB_DIRS = ("/var/lib/rpm", "/usr/lib/sysimage/rpm")

#: Files or binaries whose presence means an engine is installed (node paths).
ENGINE_MARKERS: Dict[str, Tuple[str, ...]] = {
    "containerd": ("/etc/containerd/config.toml", "/usr/bin/containerd", "/usr/local/bin/containerd"),
    "docker": ("/etc/docker/daemon.json", "/usr/bin/dockerd", "/usr/local/bin/dockerd"),
    "crio": ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d", "/usr/bin/crio", "/usr/local/bin/crio"),
}

#: ``runner(argv) -> stdout`` or None when the command is missing or fails.
Runner = Callable[[Sequence[str]], Optional[str]]


@dataclass(frozen=True)
class OsRelease:
    """The three ``/etc/os-release`` fields that choose a bundle target."""

    id: str = ""
    id_like: Tuple[str, ...] = ()
    version_id: str = ""

    def __str__(self) -> str:
        return f"{self.id or 'unknown'} {self.version_id}".strip()


@dataclass(frozen=True)
class NodeFacts:
    """Everything the installer needs to know about the node before it changes anything."""

    root: Path
    os: OsRelease
    package_format: Optional[str]  #: "deb" or "rpm"; None when neither dpkg nor rpm is there
    arch: str  #: in the package world's own spelling (amd64 for deb, x86_64 for rpm)
    engines: Tuple[str, ...] = ()  #: detected engines, in ENGINE_MARKERS order
    rpm_dbpath: Optional[str] = None  #: node path of the rpm database when package_format is rpm
    driver: bool = False  #: an NVIDIA kernel driver is loaded (CDI can be generated)
    notes: Tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        """One phrase naming the node, e.g. ``ubuntu 22.04, deb, amd64``."""
        return f"{self.os}, {self.package_format or 'no dpkg/rpm'}, {self.arch}"


def parse_os_release(text: str) -> OsRelease:
    """Parse the shell-like ``KEY=value`` lines of os-release(5).

    >>> parse_os_release('ID=ubuntu\\nID_LIKE=debian\\nVERSION_ID="22.04"\\n').version_id
    '22.04'
    """
    values: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw, posix=True)
        except ValueError:  # an unbalanced quote: keep the raw text rather than fail detection
            parts = [raw.strip("\"'")]
        values[key.strip()] = " ".join(parts)
    return OsRelease(
        id=values.get("ID", "").lower(),
        id_like=tuple(values.get("ID_LIKE", "").lower().split()),
        version_id=values.get("VERSION_ID", ""),
    )


def normalize_arch(arch: str, package_format: Optional[str]) -> str:
    """Spell ``arch`` the way ``package_format`` does (x86_64 <-> amd64, aarch64 <-> arm64, ppc64le <-> ppc64el).

    >>> normalize_arch("x86_64", "deb")
    'amd64'
    """
    arch = arch.strip()
    for deb, rpm in _ARCH_PAIRS:
        if arch in (deb, rpm):
            return rpm if package_format == "rpm" else deb
    return arch


def detect_package_format(root: Path, which: Callable[[str], Optional[str]]) -> Tuple[Optional[str], Optional[str]]:
    """Return ``(format, rpm_dbpath)``: the database under the root decides, then the tools on PATH.

    A dpkg database wins over rpm because Debian hosts often carry an ``rpm`` binary too.
    """
    if rooted(root, DPKG_STATUS).is_file():
        return "deb", None
    for dbpath in RPM_DB_DIRS:
        if rooted(root, dbpath).is_dir():
            return "rpm", dbpath
    if is_live_root(root):
        if which("dpkg"):
            return "deb", None
        if which("rpm"):
            return "rpm", RPM_DB_DIRS[0]
    return None, None


def detect_arch(package_format: Optional[str], runner: Runner) -> str:
    """Ask the package manager for its architecture, else ``uname -m``; spelled for ``package_format``."""
    candidates: List[Sequence[str]] = []
    if package_format == "deb":
        candidates.append(["dpkg", "--print-architecture"])
    elif package_format == "rpm":
        candidates.append(["rpm", "--eval", "%{_arch}"])
    candidates.append(["uname", "-m"])
    for argv in candidates:
        out = runner(argv)
        if out and out.strip() and "%" not in out:
            return normalize_arch(out.strip(), package_format)
    return normalize_arch(os.uname().machine, package_format)


def detect_engines(root: Path) -> Tuple[str, ...]:
    """Names of the container engines with a config file or binary under ``root``."""
    return tuple(
        name for name, markers in ENGINE_MARKERS.items() if any(rooted(root, m).exists() for m in markers)
    )


def driver_present(root: Path) -> bool:
    """True when the NVIDIA kernel driver shows itself under ``root``."""
    return rooted(root, "/proc/driver/nvidia/version").exists() or rooted(root, "/dev/nvidiactl").exists()


def detect_node(root: Path, runner: Runner, which: Callable[[str], Optional[str]]) -> NodeFacts:
    """Read the node's facts under ``root``.

    :param runner: runs an argv and returns stdout, or None when it fails (see :func:`proc_runner`).
    :param which: finds a command on PATH.
    :raises ToolError: when ``root`` is not a directory.
    """
    if not root.is_dir():
        raise ToolError(f"the root {root} is not a directory")
    notes: List[str] = []
    os_release = OsRelease()
    for candidate in ("/etc/os-release", "/usr/lib/os-release"):
        path = rooted(root, candidate)
        if path.is_file():
            os_release = parse_os_release(path.read_text(encoding="utf-8", errors="replace"))
            break
    else:
        notes.append(f"no /etc/os-release under {root}")
    package_format, dbpath = detect_package_format(root, which)
    return NodeFacts(
        root=root,
        os=os_release,
        package_format=package_format,
        arch=detect_arch(package_format, runner),
        engines=detect_engines(root),
        rpm_dbpath=dbpath,
        driver=driver_present(root),
        notes=tuple(notes),
    )


def proc_runner(argv: Sequence[str]) -> Optional[str]:
    """A :data:`Runner` over :func:`plumbing.proc.run` that returns None instead of raising."""
    from plumbing import proc  # the chokepoint; imported here so pure users of this module stay light

    try:
        result = proc.run(argv, check=False, timeout=30)
    except ToolError:
        return None
    if result.returncode != 0:
        return None
    return result.stdout.decode("utf-8", "replace")
