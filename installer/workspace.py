"""The node-side workspace of a run: the per-root lock and the private staging directory.

Every command that changes the node (install, uninstall, restart) holds :func:`node_lock` for
its whole run, so two gpu-airgap processes never work on one root at once; install verifies and
extracts the bundle into :func:`staging` below the locked state directory. A run that was killed
cannot remove its staging directory; whoever takes the lock next does, since no other process
can be using one while it holds the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, List

from installer.state import STATE_DIR
from plumbing.errors import BusyError, ConfigFormatError
from plumbing.fsutil import rooted, why_unwritable

STAGING_PREFIX = "staging-"


@contextlib.contextmanager
def node_lock(root: Path) -> Iterator[Path]:
    """Hold the per-root lock on the state directory; remove the directories we created if they stay empty.

    :raises BusyError: when another gpu-airgap process holds it.
    :raises ConfigFormatError: when the state directory cannot be created (a read-only root).
    """
    state_dir = rooted(root, STATE_DIR)
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
    fd = os.open(state_dir, os.O_RDONLY)
    try:
        try:
            # distinct bits, so + is |; vermin's union-types check misreads a | between attributes
            fcntl.flock(fd, fcntl.LOCK_EX + fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BusyError(
                f"another gpu-airgap process is working on {root}; try again when it finishes"
            ) from exc
        for stale in state_dir.glob(f"{STAGING_PREFIX}*"):  # left by a run that was killed
            shutil.rmtree(stale, ignore_errors=True)
        yield state_dir
    finally:
        os.close(fd)
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
