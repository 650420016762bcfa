"""The seam every container engine implements, and the options a ``configure <engine>`` run takes.

An engine never writes: :meth:`Engine.plan` loads the current files under the root, changes them
in memory and returns a :class:`ConfigPlan` with the complete new bytes of each file it would
touch. The CLI (or the installer) then prints the diff (``--dry-run``) or applies the plan through
:func:`configure.journal.apply_changes`, which journals a backup per write for ``revert``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Tuple, runtime_checkable

from configure.changes import FileChange
from configure.validate import check_runtime_name, check_runtime_path, existing_root


@dataclass(frozen=True)
class RuntimeOptions:
    """What the operator asked for; paths are node paths, mapped under ``root`` by the engine."""

    root: Path = Path("/")
    config: Optional[str] = None  #: main config file (engine default when None)
    drop_in: Optional[str] = None  #: drop-in file (engine default when None)
    no_drop_in: bool = False  #: edit the main config in place
    runtime_name: str = "nvidia"
    runtime_path: str = "/usr/bin/nvidia-container-runtime"
    set_as_default: bool = False
    cdi: bool = False
    systemd_cgroup: str = "auto"  #: auto | true | false
    hook: bool = False  #: CRI-O/podman: write the OCI hook instead of a runtime entry
    hooks_dir: Optional[str] = None  #: podman: the hooks directory to write the hook to (node path)
    user: Optional[str] = None  #: podman: configure this user's rootless podman (their ~/.config)
    container: Optional[str] = None  #: lxc: the container whose config gets the nvidia hook
    lxcpath: Optional[str] = None  #: lxc: the containers' directory (lxc-start -P; default /var/lib/lxc)
    devices: Optional[str] = None  #: lxc: NVIDIA_VISIBLE_DEVICES for the container (default all)
    capabilities: Optional[str] = None  #: lxc: NVIDIA_DRIVER_CAPABILITIES (default compute,utility)
    distro: Optional[str] = None  #: containerd: which one (``--distro``); detected when None
    force: bool = False  #: take the configuration over from the GPU Operator

    def validate(self) -> None:
        """:raises UsageError: for a runtime name or path no engine can use, or a root that is not a directory."""
        check_runtime_name(self.runtime_name)
        check_runtime_path(self.runtime_path)
        existing_root(self.root)


@dataclass
class ConfigPlan:
    """What one engine run would do: the files, and what the user should know."""

    engine: str
    changes: List[FileChange] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    #: facts read back from the rendered files, e.g. CONFIG_VERSION=2, RUNTIME=nvidia, DEFAULT=runc
    facts: Dict[str, str] = field(default_factory=dict)
    #: recorded with each write so revert and verify know the operator's choice and the old default
    notes: Dict[str, object] = field(default_factory=dict)
    #: what the operator does next, when it is not "restart the engine" (podman, lxc)
    next_step: str = ""

    @property
    def changed(self) -> bool:
        """True when applying the plan would write at least one file."""
        return any(change.changed for change in self.changes)


class Engine(Protocol):
    """One container engine's configuration (containerd, docker, crio, podman, lxc)."""

    name: str

    def plan(self, options: RuntimeOptions) -> ConfigPlan:
        """Load, change in memory and render; never write."""
        ...

    def report(self, root: Path, runtime_name: str, config: Optional[str] = None) -> Dict[str, str]:
        """Read back the files on disk and return the facts (KEY=value pairs) about ``runtime_name``.

        :param config: node path of the main config (``--config`` of the configure run); the engine's
            default when None.
        """
        ...


@runtime_checkable
class SelfChecking(Protocol):
    """An engine without a runtime entry (podman, lxc): ``verify`` asks it what to check."""

    def check(self, root: Path, notes: Dict[str, Any]) -> Tuple[List[str], List[str]]:
        """``(checks that passed, problems)`` for what the journal ``notes`` say was configured."""
        ...
