"""Node facts: what the node under ``--root`` is, for everyone who installs on it or configures it.

* :class:`NodeFacts` (:func:`detect_node`): distribution, package manager, architecture, container
  engines and NVIDIA driver, which the installer needs to pick a bundle target and the engines to
  register with. It reads files under ``--root`` and asks dpkg, rpm or uname for the architecture
  through the one subprocess chokepoint (passed in, so tests can script it).
* Which containerd is installed (1.x or 2.x, :func:`containerd_version`), which the containerd
  engine needs to pick a config version. On the live system (root ``/``) we ask the binary,
  ``containerd --version``, through :func:`plumbing.proc.run`. Under any other root we never
  execute a binary from it (it may be another architecture, or not trustworthy); we read the
  package database instead, ``<root>/var/lib/dpkg/status`` (packages ``containerd``,
  ``containerd.io``). Unknown means 1.x: the safe choice, because a version 2 config is accepted
  by every containerd from 1.3 on and a version 3 config by none before 2.0.
* The kubelet's cgroup driver, from ``<root>/var/lib/kubelet/config.yaml`` (``cgroupDriver``,
  :func:`kubelet_cgroup_driver`).

The parsers are pure (:func:`parse_os_release`, :func:`parse_containerd_version`,
:func:`dpkg_containerd_version`); the ``detect_*`` functions and the probes are the thin loaders.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from configure.changes import read_optional
from configure.distros import detection
from configure.systems import NodeSystem, identify
from plumbing.arch import normalize_arch
from plumbing.errors import ToolError
from plumbing.fsutil import is_live_root, rooted
from plumbing.proc import run, which

#: Where each package manager keeps its database on a node (node paths, mapped under the root).
DPKG_STATUS = "/var/lib/dpkg/status"
RPM_DB_DIRS = ("/var/lib/rpm", "/usr/lib/sysimage/rpm")

#: Files or binaries whose presence means an engine is installed (node paths).
ENGINE_MARKERS: Dict[str, Tuple[str, ...]] = {
    "containerd": ("/etc/containerd/config.toml", "/usr/bin/containerd", "/usr/local/bin/containerd"),
    "docker": ("/etc/docker/daemon.json", "/usr/bin/dockerd", "/usr/local/bin/dockerd"),
    "crio": ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d", "/usr/bin/crio", "/usr/local/bin/crio"),
    "podman": ("/usr/bin/podman", "/usr/local/bin/podman"),
    # LXC is configured per container (``configure lxc --container``); install says what to run
    "lxc": ("/usr/bin/lxc-start", "/usr/share/lxc/hooks/nvidia"),
}

#: ``runner(argv) -> stdout`` or None when the command is missing or fails.
Runner = Callable[[Sequence[str]], Optional[str]]


@dataclass(frozen=True)
class OsRelease:
    """The ``/etc/os-release`` fields that choose a bundle target (ID, ID_LIKE, VERSION_ID) and NAME."""

    id: str = ""
    id_like: Tuple[str, ...] = ()
    version_id: str = ""
    name: str = ""  #: NAME, to name a system the supported-systems table does not know

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

    @property
    def system(self) -> NodeSystem:
        """Which system this is, its package manager and whether it is supported (:mod:`configure.systems`)."""
        os = self.os
        return identify(os.id, os.id_like, os.version_id, os.name, self.package_format)

    def describe(self) -> str:
        """One phrase naming the node, e.g. ``Ubuntu 22.04 (apt), deb, amd64``."""
        return f"{self.system.label()}, {self.package_format or 'no dpkg/rpm'}, {self.arch}"


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
        name=values.get("NAME", ""),
    )


def detect_package_format(
    root: Path, which: Callable[[str], Optional[str]]
) -> Tuple[Optional[str], Optional[str]]:
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
    """Names of the container engines with a config file or binary under ``root``.

    The containerd of k3s, RKE2, MicroK8s or k0s counts as containerd (:mod:`configure.distros.detection`).
    """
    return tuple(
        name
        for name, markers in ENGINE_MARKERS.items()
        if any(rooted(root, m).exists() for m in markers) or (name == "containerd" and detection.detect(root))
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
    try:
        result = run(argv, check=False, timeout=30)
    except ToolError:
        return None
    if result.returncode != 0:
        return None
    return result.stdout.decode("utf-8", "replace")


# -- containerd and kubelet, for the engines ------------------------------------------

ContainerdVersion = Tuple[int, int]
VersionProbe = Callable[[Path], Optional[ContainerdVersion]]
KubeletProbe = Callable[[Path], Optional[str]]

KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
_CONTAINERD_PACKAGES = ("containerd", "containerd.io")
_VERSION = re.compile(r"(?:^|\s)v?(\d+)\.(\d+)\.\d+")


def parse_containerd_version(text: str) -> Optional[ContainerdVersion]:
    """Pull (major, minor) out of ``containerd --version`` output or a package version.

    >>> parse_containerd_version("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7")
    (2, 1)
    """
    match = _VERSION.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def dpkg_containerd_version(
    status: str, packages: Sequence[str] = _CONTAINERD_PACKAGES
) -> Optional[ContainerdVersion]:
    """Find the installed package among ``packages`` (containerd's by default) in the text of a dpkg status file."""
    for stanza in re.split(r"\n\s*\n", status):
        fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, flags=re.MULTILINE))
        if fields.get("Package") in packages and fields.get("Status", "").endswith(" installed"):
            # Drop an epoch ("1:2.0.0-1") so the regex sees the upstream version first.
            return parse_containerd_version(" " + fields.get("Version", "").split(":")[-1])
    return None


def tool_version(root: Path, command: str, packages: Sequence[str]) -> Optional[ContainerdVersion]:
    """(major, minor) of ``command`` under ``root``: ``COMMAND --version`` on ``/``, else dpkg's record; None: unknown."""
    if is_live_root(root):
        binary = which(command)
        if binary is not None:
            try:
                found = parse_containerd_version(
                    run([binary, "--version"], check=False, timeout=20).stdout.decode()
                )
            except ToolError:
                found = None
            if found is not None:
                return found
    raw = read_optional(rooted(root, DPKG_STATUS))
    return dpkg_containerd_version(raw.decode("utf-8", "replace"), packages) if raw is not None else None


def containerd_version(root: Path) -> Optional[ContainerdVersion]:
    """The (major, minor) version of the containerd installed under ``root``, or None when unknown."""
    return tool_version(root, "containerd", _CONTAINERD_PACKAGES)


def podman_version(root: Path) -> Optional[ContainerdVersion]:
    """The (major, minor) version of the podman installed under ``root``, or None when unknown."""
    return tool_version(root, "podman", ("podman",))


def kubelet_cgroup_driver(root: Path) -> Optional[str]:
    """The kubelet's ``cgroupDriver`` (``systemd`` or ``cgroupfs``), or None without a kubelet config.

    A config without the key means the kubelet's built-in default, ``cgroupfs``. An unreadable
    config is treated like a missing one: we then only warn, we never guess.
    """
    import yaml  # here, so the installer's start-up does not pay for PyYAML

    raw = read_optional(rooted(root, KUBELET_CONFIG))
    if raw is None:
        return None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    driver = data.get("cgroupDriver", "cgroupfs")
    return driver if driver in ("systemd", "cgroupfs") else None
