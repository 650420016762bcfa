"""The cgroups the live tests' containers use, and how they are cleaned up.

Each daemon a test starts puts its containers under a top-level cgroup of its own
(:func:`unique_cgroup`), killed and removed when it stops. Some cgroups have a fixed name instead
(:data:`SHARED_CGROUPS`): an engine puts a container there when it is not told a parent, as
``configure verify --live`` does not tell it. Two workers share them, so a test's cleanup must
neither kill in them nor remove them (one worker's podman view, stopping, killed the container
the other worker's live check was starting). The session removes them once, at its very end
(``pytest_unconfigure`` in tests/conftest.py), unless they were there before it began.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

CGROUP_ROOT = Path("/sys/fs/cgroup")

#: podman's parent without --cgroup-parent (cgroupfs); containerd's /<namespace>/<id> for CRI pods
#: without a parent (the k8s.io namespace); the cgroup lxc-start moves its monitor to while it cleans up
SHARED_CGROUPS = ("libpod_parent", "k8s.io", "lxc.pivot")


def unique_cgroup(prefix: str = "gpu-airgap-live") -> str:
    """A top-level cgroup name nobody else uses, for the containers of one test."""
    return f"{prefix}-{os.getpid()}-{os.urandom(3).hex()}"


def _hierarchies() -> list[Path]:
    return (
        [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]
        if CGROUP_ROOT.is_dir()
        else []
    )


def _own(names: Sequence[str]) -> Sequence[str]:
    shared = [name for name in names if name in SHARED_CGROUPS]
    assert not shared, f"{shared} are shared by every worker: the session removes them, not a test"
    return names


def remove_cgroups(names: Sequence[str], existed: Optional[set[Path]] = None) -> None:
    """Remove the (empty) cgroups ``names`` in every hierarchy, deepest first; keep those in ``existed``."""
    for hierarchy in _hierarchies():
        for name in names:
            top = hierarchy / name
            if top.is_dir() and (existed is None or top not in existed):
                remove_cgroup_tree(top)


def remove_cgroup_tree(top: Path) -> None:
    """Remove the cgroup ``top`` and the ones below it, deepest first; one that still has processes stays."""
    for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            directory.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


def kill_cgroup_members(names: Sequence[str], existed: Optional[set[Path]] = None) -> None:
    """SIGKILL every process in the cgroups ``names`` (not those in ``existed``): containers left behind."""
    for hierarchy in _hierarchies():
        for name in names:
            top = hierarchy / name
            if not top.is_dir() or (existed is not None and top in existed):
                continue
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    for pid in procs.read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)


def existing_cgroups(names: Sequence[str]) -> set[Path]:
    """Which of the top-level cgroups ``names`` exist now, in any hierarchy."""
    return {h / n for h in _hierarchies() for n in names if (h / n).is_dir()}


def release_cgroups(names: Sequence[str], existed: set[Path]) -> None:
    """Kill what still runs in a test's own cgroups ``names``, then remove them (not the shared ones)."""
    _release(_own(names), existed)


def release_shared_cgroups(existed: set[Path]) -> None:
    """At the end of the session: kill what the tests left in the shared cgroups, then remove them."""
    _release(SHARED_CGROUPS, existed)


def _release(names: Sequence[str], existed: set[Path]) -> None:
    kill_cgroup_members(names, existed)
    time.sleep(0.05)  # a moment for the kernel to empty them
    remove_cgroups(names, existed)
