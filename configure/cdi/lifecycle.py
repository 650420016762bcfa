"""A CDI spec older than the driver it describes: how we tell (``status``, ``verify``, ``configure cdi --refresh``).

The driver's version is the loaded kernel module's (``/proc/driver/nvidia/version``) when the node
shows one, else the version in the name of ``libnvidia-ml.so.<version>`` under the driver root
(:mod:`configure.driverroot`: ``/`` or the GPU Operator's ``/run/nvidia/driver``): the user-space
driver the next load uses. A spec is older than its driver when

- it mounts versioned driver libraries (``libcuda.so.X``, ``libnvidia-*.so.X``, what ``nvidia-ctk
  cdi generate`` writes) and none is of the driver's version: it was generated for another driver;
- it mounts none (a device-node spec) but says which driver it was generated for (the first line
  of a YAML spec we write: :data:`GENERATED_FOR`), and that is not the driver's version;
- it says neither, and its file is older than that ``libnvidia-ml.so.<version>``: the driver was
  installed or upgraded after the spec was written, and nothing rewrote it.

Versions are compared, not times, wherever the spec names them: package managers keep the
upstream file times, so an upgrade's library may be "older" than a spec of the old driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import List, Optional, Sequence, Tuple

from configure.changes import read_optional
from configure.driverroot import LIBRARY_DIRS, detect_driver_root
from plumbing.errors import ToolError
from plumbing.fsutil import rooted, rooted_or_none

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
_DRIVER_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")
#: the comment a YAML spec we generate opens with (CDI readers ignore comments; JSON has none)
GENERATED_FOR = "# gpu-airgap: generated for NVIDIA driver "
_GENERATED_FOR = re.compile(r"\A" + re.escape(GENERATED_FOR) + r"(\d+\.\d+(?:\.\d+)?)\n")
_DRIVER_LIB = re.compile(r"^lib(?:cuda|nvidia-[A-Za-z0-9_-]+)\.so\.(\d+\.\d+(?:\.\d+)?)$")
_NVML = re.compile(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class InstalledDriver:
    """The user-space driver under the driver root, known by its ``libnvidia-ml.so.<version>``."""

    version: str
    library: str  #: node path of the library
    mtime: float


def installed_driver(root: Path) -> Optional[InstalledDriver]:
    """The newest ``libnvidia-ml.so.<version>`` under the driver root of ``root``; None when there is none."""
    driver = detect_driver_root(root)
    base = "" if driver.path == "/" else driver.path
    found: List[Tuple[Tuple[int, ...], InstalledDriver]] = []
    for directory in LIBRARY_DIRS:
        path = rooted_or_none(root, base + directory)
        if path is None or not path.is_dir():
            continue
        for entry in path.iterdir():
            match = _NVML.match(entry.name)
            if match and entry.is_file():
                version = match.group(1)
                node_path = f"{base}{directory}/{entry.name}"
                key = tuple(int(part) for part in version.split("."))
                found.append((key, InstalledDriver(version, node_path, entry.stat().st_mtime)))
    return max(found, key=lambda item: item[0])[1] if found else None


def driver_version(root: Path) -> Optional[str]:
    """The loaded NVIDIA kernel driver's version under ``root`` (``550.54.14``); None when unknown."""
    try:
        raw = read_optional(rooted(root, DRIVER_VERSION_FILE))
    except ToolError:
        return None
    match = _DRIVER_VERSION.search((raw or b"").decode("utf-8", "replace"))
    return match.group(1) if match else None


def current_driver(root: Path, loaded: Optional[str]) -> Optional[str]:
    """The driver's version: the loaded module's, else the installed ``libnvidia-ml``'s; None when unknown."""
    if loaded:
        return loaded
    installed = installed_driver(root)
    return installed.version if installed else None


def with_header(raw: bytes, version: Optional[str]) -> bytes:
    """``raw`` YAML opening with :data:`GENERATED_FOR` ``version`` (replacing an older header); as is without one."""
    body = _GENERATED_FOR.sub("", raw.decode("utf-8", "replace"), count=1).encode()
    return (GENERATED_FOR + version + "\n").encode() + body if version else body


def generated_for(raw: bytes) -> Optional[str]:
    """The driver version a spec we generated names in its first line; None for any other spec."""
    match = _GENERATED_FOR.match(raw.decode("utf-8", "replace"))
    return match.group(1) if match else None


def spec_driver_versions(mounts: Sequence[str]) -> List[str]:
    """The driver versions of the versioned libraries among a spec's mount host paths."""
    return sorted({m.group(1) for m in (_DRIVER_LIB.match(PurePosixPath(p).name) for p in mounts) if m})


def older_than_driver(
    mounts: Sequence[str],
    spec_mtime: Optional[float],
    loaded: Optional[str],
    installed: Optional[InstalledDriver],
    made_for: Optional[str] = None,
) -> List[str]:
    """Why a spec with these mount host paths, header and file time describes an older driver (module docstring)."""
    versions = spec_driver_versions(mounts)
    driver, state = (loaded, "loaded") if loaded else (installed.version if installed else None, "installed")
    if versions:
        if driver and driver not in versions:
            return [f"it mounts libraries of driver {', '.join(versions)}, but driver {driver} is {state}"]
        return []
    if made_for:
        if driver and driver != made_for:
            return [
                f"it was generated for driver {made_for}, but driver {driver} is {state}; "
                "regenerate it: gpu-airgap configure cdi --refresh"
            ]
        return []
    if installed is not None and spec_mtime is not None and spec_mtime < installed.mtime:
        return [
            f"it was written before driver {installed.version} was installed ({installed.library} is newer); "
            "regenerate it: gpu-airgap configure cdi --refresh"
        ]
    return []
