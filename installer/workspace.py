"""The node-side workspace of a run: the per-root lock and the private staging directory.

Every command that changes the node (install, uninstall, restart, and configure's writes) holds
the node lock (:func:`plumbing.nodelock.node_lock`) for its whole run, so two gpu-airgap processes
never work on one root at once; install verifies and extracts the bundle into :func:`staging`
below the locked state directory. A run that was killed cannot remove its staging directory;
whoever takes the lock next does, since no other process can be using one while it holds the lock.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, List

from installer.state import STATE_DIR
from plumbing import nodelock
from plumbing.errors import ConfigFormatError
from plumbing.fsutil import require_writer, rooted, why_unwritable

STAGING_PREFIX = "staging-"


@contextlib.contextmanager
def locked_state_dir(root: Path) -> Iterator[Path]:
    """Hold the node lock of ``root`` (:func:`plumbing.nodelock.node_lock`); yield the state directory.

    Stale staging directories go; the directories created for the state directory are removed
    again when they stay empty.

    :raises BusyError: when another gpu-airgap process still holds it after the wait, naming its pid.
    :raises ConfigFormatError: when the state directory cannot be created (a read-only root).
    """
    with nodelock.node_lock(root):
        state_dir = rooted(root, STATE_DIR)
        require_writer(state_dir)  # every run that takes this lock writes there
        created: List[Path] = []
        probe = state_dir
        while not probe.exists():
            created.append(probe)
            probe = probe.parent
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigFormatError(
                state_dir, why_unwritable(state_dir) or f"cannot be created: {exc.strerror or exc}"
            ) from exc
        try:
            for stale in state_dir.glob(f"{STAGING_PREFIX}*"):  # left by a run that was killed
                shutil.rmtree(stale, ignore_errors=True)
            yield state_dir
        finally:
            for directory in created:  # deepest first: leave the root exactly as we found it
                with contextlib.suppress(OSError):
                    directory.rmdir()


@contextlib.contextmanager
def staging(state_dir: Path) -> Iterator[Path]:
    """A private (0700) staging directory, always removed afterwards.

    :raises ConfigFormatError: when the state directory cannot be written (a read-only root).
    """
    try:
        path = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=state_dir))
    except OSError as exc:
        raise ConfigFormatError(
            state_dir,
            why_unwritable(state_dir / STAGING_PREFIX) or f"cannot be written: {exc.strerror or exc}",
        ) from exc
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
