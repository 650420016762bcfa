"""The node-side workspace of a run: the per-root lock and the private staging directory.

Every command that changes the node (install, uninstall, restart) holds :func:`node_lock` for
its whole run, so two gpu-airgap processes never work on one root at once; install verifies and
extracts the bundle into :func:`staging` below the locked state directory.
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
from plumbing.errors import BusyError
from plumbing.fsutil import rooted


@contextlib.contextmanager
def node_lock(root: Path) -> Iterator[Path]:
    """Hold the per-root lock on the state directory; remove the directories we created if they stay empty.

    :raises BusyError: when another gpu-airgap process holds it.
    """
    state_dir = rooted(root, STATE_DIR)
    created: List[Path] = []
    probe = state_dir
    while not probe.exists():
        created.append(probe)
        probe = probe.parent
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir, os.O_RDONLY)
    try:
        try:
            # distinct bits, so + is |; vermin's union-types check misreads a | between attributes
            fcntl.flock(fd, fcntl.LOCK_EX + fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BusyError(f"another gpu-airgap process is working on {root}; try again when it finishes") from exc
        yield state_dir
    finally:
        os.close(fd)
        for directory in created:  # deepest first: leave the root exactly as we found it
            with contextlib.suppress(OSError):
                directory.rmdir()


@contextlib.contextmanager
def staging(state_dir: Path) -> Iterator[Path]:
    """A private (0700) staging directory, always removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="staging-", dir=state_dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
