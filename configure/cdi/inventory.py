"""Every CDI spec for a kind on a root, which of them the runtime uses, and which are stale.

How a CDI registry reads specs (tags.cncf.io/container-device-interface, ``pkg/cdi``), and so how
containerd, CRI-O, Docker, podman and nvidia-container-runtime do: it walks the spec directories
(by default ``/etc/cdi`` then ``/var/run/cdi``; the index is the priority), loads every ``*.yaml``
and ``*.json`` file directly in them, skips files it cannot load, and resolves a device name two
specs both define: the spec from the higher-priority directory wins (``/var/run/cdi`` over
``/etc/cdi``), and two specs of the *same* directory make the device unusable for both.

So two specs for ``nvidia.com/gpu`` never add up: one of them is dead weight that hides the other
(often a stale static one), or both lose their devices. :func:`find_specs` reports them all and
:func:`specs_in_effect` the ones the runtime will take devices from.

A spec is **stale** (:func:`stale_reasons`) when it no longer describes the node:

1. a host path it names does not exist under the root (a device node, a mount's ``hostPath``, a
   hook's ``path``): the runtime fails every container that asks for the device;
2. it is older than the driver it describes (:mod:`configure.cdi.lifecycle`): it mounts driver
   libraries of another version than the loaded (else installed) driver's, or, naming none, its
   file is older than the driver's ``libnvidia-ml.so.<version>``;
3. a device node names ``major``/``minor`` numbers and the node's character device has others.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional, Sequence, Tuple

from configure.cdi.lifecycle import generated_for, installed_driver, older_than_driver
from configure.cdi.spec import KIND, check_spec, missing_host_paths
from configure.changes import read_optional
from plumbing.errors import ConfigFormatError, ToolError
from plumbing.fsutil import rooted, rooted_or_none

#: the CDI library's DefaultSpecDirs, lowest priority first
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


@dataclass(frozen=True)
class SpecFile:
    """One spec file in a CDI spec directory."""

    path: str  #: node path
    priority: int  #: index of its directory in the spec directories
    kind: Optional[str]  #: None when the file cannot be loaded
    devices: Tuple[str, ...] = ()
    problems: Tuple[str, ...] = ()  #: why a registry would reject it (empty: it loads)
    data: Any = field(default=None, compare=False, repr=False)
    mtime: Optional[float] = field(default=None, compare=False)  #: the file's modification time
    made_for: Optional[str] = None  #: the driver version our generator wrote in its first line


@dataclass(frozen=True)
class KindSpecs:
    """The specs for one kind on a root and how a registry resolves their devices."""

    kind: str
    files: Tuple[SpecFile, ...]  #: valid specs for the kind, in scan order
    invalid: Tuple[SpecFile, ...]  #: files a registry skips that look like the kind's (by kind or name)
    providers: Dict[str, str]  #: device name -> node path of the spec the runtime takes it from
    conflicts: Tuple[str, ...]  #: device names no spec provides: two specs of one directory define them

    @property
    def in_effect(self) -> Tuple[SpecFile, ...]:
        """The specs the runtime takes at least one device from."""
        used = set(self.providers.values())
        return tuple(f for f in self.files if f.path in used)

    @property
    def duplicates(self) -> bool:
        """More than one valid spec defines this kind."""
        return len(self.files) > 1

    def duplicate_problem(self) -> Optional[str]:
        """One sentence naming the duplicate specs and what the runtime makes of them; None when single."""
        if not self.duplicates:
            return None
        names = ", ".join(f.path for f in self.files)
        if self.conflicts:
            lost = ", ".join(sorted(self.conflicts))
            what = f"devices defined by two specs of one directory are unusable ({self.kind}={lost})"
        else:
            hidden = [f.path for f in self.files if f not in self.in_effect]
            what = f"the runtime uses {', '.join(f.path for f in self.in_effect)}"
            what += (
                f" and ignores {', '.join(hidden)} for the devices they share"
                if hidden
                else " for their shared devices"
            )
        return f"{len(self.files)} CDI specs define {self.kind} ({names}): {what}; keep one"


def find_specs(root: Path, kind: str = KIND, spec_dirs: Sequence[str] = SPEC_DIRS) -> KindSpecs:
    """Every spec for ``kind`` in ``spec_dirs`` under ``root``, resolved as a CDI registry resolves them."""
    files: List[SpecFile] = []
    invalid: List[SpecFile] = []
    providers: Dict[str, str] = {}
    provider_priority: Dict[str, int] = {}
    conflicts: List[str] = []
    vendor = kind.split("/")[0].split(".")[0]
    for priority, directory in enumerate(spec_dirs):
        for spec in _load_dir(root, directory, priority):
            if spec.kind != kind:
                # a broken file named like the vendor's is most likely the kind's spec, and the registry skips it
                if spec.problems and PurePosixPath(spec.path).name.startswith(vendor):
                    invalid.append(spec)
                continue
            if spec.problems:
                invalid.append(spec)
                continue
            files.append(spec)
            for device in spec.devices:
                if device in providers and provider_priority[device] == priority:
                    conflicts.append(device)
                providers[device] = spec.path
                provider_priority[device] = priority
    for device in conflicts:
        providers.pop(device, None)
    return KindSpecs(kind, tuple(files), tuple(invalid), providers, tuple(dict.fromkeys(conflicts)))


def specs_in_effect(root: Path, kind: str = KIND) -> List[str]:
    """Node paths of the specs the runtime takes ``kind``'s devices from on ``root`` (for engines using CDI)."""
    return [spec.path for spec in find_specs(root, kind).in_effect]


def spec_paths_for_kind(root: Path, kind: str = KIND) -> List[str]:
    """Node paths of every valid spec for ``kind``, in effect or not."""
    return [spec.path for spec in find_specs(root, kind).files]


def stale_reasons(root: Path, spec: SpecFile, driver: Optional[str]) -> List[str]:
    """Why ``spec`` no longer describes the node under ``root`` (module docstring); empty when current."""
    data = spec.data if isinstance(spec.data, dict) else {}
    reasons = missing_host_paths(root, data)
    reasons.extend(_missing_hooks(root, data))
    reasons.extend(
        older_than_driver(_mount_paths(data), spec.mtime, driver, installed_driver(root), spec.made_for)
    )
    reasons.extend(_device_number_mismatches(root, data))
    return reasons


def _load_dir(root: Path, directory: str, priority: int) -> List[SpecFile]:
    base = rooted_or_none(root, directory)
    if base is None or not base.is_dir():
        return []
    specs: List[SpecFile] = []
    for entry in sorted(base.iterdir()):
        node_path = f"{directory}/{entry.name}"
        resolved = rooted_or_none(root, node_path)  # a linked spec: its target is a node path
        if entry.suffix not in (".yaml", ".json") or resolved is None or resolved.is_dir():
            continue
        try:
            raw = read_optional(resolved) or b""  # a FIFO spec would otherwise hang status and verify
        except ConfigFormatError as exc:
            specs.append(SpecFile(node_path, priority, None, problems=(exc.detail,)))
            continue
        data, problems = check_spec(raw)
        kind = data.get("kind") if isinstance(data, dict) and isinstance(data.get("kind"), str) else None
        devices = (
            tuple(str(d.get("name")) for d in (data.get("devices") or []) if isinstance(d, dict))
            if isinstance(data, dict) and isinstance(data.get("devices"), list)
            else ()
        )
        # check_spec judges NVIDIA specs; another vendor's spec is only judged on the rest.
        if kind is not None and kind != KIND and not entry.name.startswith("nvidia"):
            problems = [p for p in problems if not p.startswith("kind is ")]
        specs.append(
            SpecFile(
                node_path,
                priority,
                kind,
                devices,
                tuple(problems),
                data,
                resolved.stat().st_mtime,
                generated_for(raw),
            )
        )
    return specs


def _all_edits(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    edits = [data.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in data.get("devices") or [] if isinstance(d, dict)]
    return [e for e in edits if isinstance(e, dict)]


def _mount_paths(data: Dict[str, Any]) -> List[str]:
    return [
        str(m.get("hostPath")) for e in _all_edits(data) for m in e.get("mounts") or [] if isinstance(m, dict)
    ]


def _missing_hooks(root: Path, data: Dict[str, Any]) -> List[str]:
    missing: List[str] = []
    for edits in _all_edits(data):
        for hook in edits.get("hooks") or []:
            path = hook.get("path") if isinstance(hook, dict) else None
            if not isinstance(path, str) or path in missing:
                continue
            try:
                present = os.path.lexists(rooted(root, path))
            except ToolError:
                present = False
            if not present:
                missing.append(path)
    return [f"hook {path} does not exist on the node" for path in missing]


def _device_number_mismatches(root: Path, data: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    for edits in _all_edits(data):
        for node in edits.get("deviceNodes") or []:
            if not isinstance(node, dict) or node.get("major") is None:
                continue
            host = str(node.get("hostPath") or node.get("path"))
            try:
                st = rooted(root, host).stat()
            except (OSError, ToolError):
                continue  # a missing node is reported by missing_host_paths
            if not stat.S_ISCHR(st.st_mode):
                continue
            try:
                want = (int(node["major"]), int(node.get("minor") or 0))
            except (TypeError, ValueError):
                continue  # not numbers: the registry rejects the spec, validation says why
            have = (os.major(st.st_rdev), os.minor(st.st_rdev))
            if want != have:
                out.append(
                    f"{host} is device {have[0]}:{have[1]} on the node, the spec says {want[0]}:{want[1]}"
                )
    return out
