"""Facts about the node under ``--root`` that runtime configuration depends on.

* Which containerd is installed (1.x or 2.x). On the live system (root ``/``) we ask the binary,
  ``containerd --version``, through :func:`plumbing.proc.run`. Under any other root we never
  execute a binary from it (it may be another architecture, or not trustworthy); we read the
  package database instead, ``<root>/var/lib/dpkg/status`` (packages ``containerd``,
  ``containerd.io``). Unknown means 1.x: the safe choice, because a version 2 config is accepted
  by every containerd from 1.3 on and a version 3 config by none before 2.0.
* The kubelet's cgroup driver, from ``<root>/var/lib/kubelet/config.yaml`` (``cgroupDriver``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional, Tuple

import yaml

from configure.changes import read_optional
from plumbing.errors import ToolError
from plumbing.fsutil import is_live_root, rooted
from plumbing.proc import run, which

ContainerdVersion = Tuple[int, int]
VersionProbe = Callable[[Path], Optional[ContainerdVersion]]
KubeletProbe = Callable[[Path], Optional[str]]

KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
DPKG_STATUS = "/var/lib/dpkg/status"
_CONTAINERD_PACKAGES = ("containerd", "containerd.io")
_VERSION = re.compile(r"(?:^|\s)v?(\d+)\.(\d+)\.\d+")


def parse_containerd_version(text: str) -> Optional[ContainerdVersion]:
    """Pull (major, minor) out of ``containerd --version`` output or a package version.

    >>> parse_containerd_version("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7")
    (2, 1)
    """
    match = _VERSION.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def dpkg_containerd_version(status: str) -> Optional[ContainerdVersion]:
    """Find the installed containerd package in the text of a dpkg status file."""
    for stanza in re.split(r"\n\s*\n", status):
        fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, flags=re.MULTILINE))
        if fields.get("Package") in _CONTAINERD_PACKAGES and fields.get("Status", "").endswith(" installed"):
            # Drop an epoch ("1:2.0.0-1") so the regex sees the upstream version first.
            return parse_containerd_version(" " + fields.get("Version", "").split(":")[-1])
    return None


def containerd_version(root: Path) -> Optional[ContainerdVersion]:
    """The (major, minor) version of the containerd installed under ``root``, or None when unknown."""
    if is_live_root(root):
        binary = which("containerd")
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
    return dpkg_containerd_version(raw.decode("utf-8", "replace")) if raw is not None else None


def kubelet_cgroup_driver(root: Path) -> Optional[str]:
    """The kubelet's ``cgroupDriver`` (``systemd`` or ``cgroupfs``), or None without a kubelet config.

    A config without the key means the kubelet's built-in default, ``cgroupfs``. An unreadable
    config is treated like a missing one: we then only warn, we never guess.
    """
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
