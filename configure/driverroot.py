"""Where the NVIDIA driver lives for the host's toolkit: the host (``/``) or the GPU Operator's driver container.

With the GPU Operator's driver container (and ``toolkit.enabled=false``, so the toolkit is the
host's), the driver's libraries and tools are not in the host's ``/usr``: the container's root is
bind-mounted at ``/run/nvidia/driver``. The Operator's validator says so in
``/run/nvidia/validations/driver-ready`` (``IS_HOST_DRIVER=false``, ``NVIDIA_DRIVER_ROOT=...``,
``NVIDIA_DEV_ROOT=...``; NVIDIA/gpu-operator ``cmd/nvidia-validator/main.go`` ``createStatusFile``
@a22dbf671f2e), and the Operator's own toolkit container sources that file and sets the same root
for its runtime (NVIDIA/nvidia-container-toolkit ``cmd/nvidia-ctk-installer/toolkit/toolkit.go``
@d34b3046758c: ``nvidia-container-cli.root``). So do we, for the host's toolkit:

- ``/etc/nvidia-container-runtime/config.toml`` gets ``[nvidia-container-cli] root`` (legacy
  mode's ``nvidia-container-cli --root``; ``nvidia-ctk cdi generate`` reads the same key as its
  ``--driver-root`` default) (:func:`plan_driver_root`);
- CDI specs name the libraries under the driver root as the host path and the path without it in
  the container (:func:`driver_libraries`), as ``nvidia-ctk cdi generate --driver-root`` does.

A ``driver-ready`` that says ``IS_HOST_DRIVER=true``, or names a root that is not a directory
under ``--root``, means the host's driver: nothing is changed. Pure over a root: reads files only.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from configure import toolkit
from configure.changes import FileChange, read_optional
from configure.engine import ConfigPlan
from plumbing.errors import ToolError
from plumbing.fsutil import is_node_path, rooted, rooted_or_none
from plumbing.textio import decode_utf8

HOST = "/"
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
DRIVER_READY = "/run/nvidia/validations/driver-ready"
CLI_SECTION = "nvidia-container-cli"
SOURCE_HOST = "host"
SOURCE_OPERATOR = "GPU Operator driver container"
#: where driver containers and distributions put the driver's libraries, relative to the driver root
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
#: the versioned driver libraries (``libcuda.so.550.54.15``, ``libnvidia-ml.so.550.54.15``)
_DRIVER_LIB = re.compile(r"^lib(?:cuda|nvidia-[A-Za-z0-9_-]+)\.so\.\d+\.\d+(?:\.\d+)?$")
#: the mount options nvidia-ctk gives driver libraries in its specs
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]


@dataclass(frozen=True)
class DriverRoot:
    """The driver root the host's toolkit must use, and where the device nodes are."""

    path: str = HOST  #: node path of the driver's root filesystem
    dev_root: str = HOST  #: node path under which ``/dev/nvidia*`` are
    source: str = SOURCE_HOST

    @property
    def containerized(self) -> bool:
        """The driver is not the host's."""
        return self.path != HOST

    def describe(self) -> str:
        """``/run/nvidia/driver (GPU Operator driver container)`` or ``/ (host)``."""
        return f"{self.path} ({self.source})"


#: the driver installed on the host, the default everywhere
HOST_DRIVER = DriverRoot()


def detect_driver_root(root: Path) -> DriverRoot:
    """The driver root under ``root``: the Operator's driver container when its validator says so, else the host."""
    path = rooted_or_none(root, DRIVER_READY)
    try:
        raw = read_optional(path) if path is not None and path.is_file() else None
    except ToolError:
        raw = None
    if raw is None:
        return HOST_DRIVER
    values = _key_values(raw.decode("utf-8", "replace"))
    if values.get("IS_HOST_DRIVER", "false").lower() == "true":
        return HOST_DRIVER
    driver = values.get("NVIDIA_DRIVER_ROOT") or OPERATOR_DRIVER_ROOT
    if not _is_dir(root, driver) or posixpath.normpath(driver) == HOST:
        return HOST_DRIVER
    dev = values.get("NVIDIA_DEV_ROOT") or driver
    return DriverRoot(driver, dev if _is_dir(root, dev) else HOST, SOURCE_OPERATOR)


def driver_libraries(root: Path, driver: DriverRoot) -> List[Tuple[str, str]]:
    """``(hostPath, containerPath)`` of every versioned driver library under a containerized driver root."""
    if not driver.containerized:
        return []
    found: List[Tuple[str, str]] = []
    for directory in LIBRARY_DIRS:
        base = rooted_or_none(root, driver.path + directory)
        if base is None or not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            if _DRIVER_LIB.match(entry.name) and not entry.is_dir():
                found.append((f"{driver.path}{directory}/{entry.name}", f"{directory}/{entry.name}"))
    return found


def plan_driver_root(root: Path, plan: ConfigPlan, config: str = toolkit.TOOLKIT_CONFIG) -> DriverRoot:
    """Add setting ``[nvidia-container-cli] root`` to ``plan`` when the driver is containerized; never writes."""
    driver = detect_driver_root(root)
    plan.facts["DRIVER_ROOT"] = driver.describe()
    if not driver.containerized:
        return driver
    path = rooted(root, config)
    old = read_optional(path)
    text = "" if old is None else decode_utf8(old, path)
    previous = toolkit.get_key(text, CLI_SECTION, "root", path)
    plan.notes.update(driver_root=driver.path, previous_driver_root=previous)
    if previous == driver.path:
        return driver
    new = toolkit.set_key(text, CLI_SECTION, "root", driver.path, path).encode()
    plan.changes.append(FileChange(path, old, new, mode=0o644))
    plan.warnings.append(
        f"the NVIDIA driver comes from the GPU Operator's driver container: set [{CLI_SECTION}] root = "
        f'"{driver.path}" in {config}'
    )
    return driver


def configured_root(root: Path, config: str = toolkit.TOOLKIT_CONFIG) -> Optional[str]:
    """The ``[nvidia-container-cli] root`` the host's toolkit uses now; None: the default, ``/``."""
    path = rooted_or_none(root, config)
    raw = read_optional(path) if path is not None and path.is_file() else None
    return None if raw is None else toolkit.get_key(decode_utf8(raw, path), CLI_SECTION, "root", path)


def _is_dir(root: Path, node_path: str) -> bool:
    if not is_node_path(node_path):
        return False
    path = rooted_or_none(root, node_path)
    return path is not None and path.is_dir()


def _key_values(text: str) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key:
            values[key.strip()] = value.strip().strip("\"'")
    return values
