"""One writer at a time beside a tree that is replaced by rename, and the leftovers of a killed one removed.

``mirror publish`` (``OUT`` beside ``.OUT.new-*`` / ``.OUT.old-*``) and ``mirror snapshot create|delete``
(``snapshots/NAME`` beside ``.NAME.new-*`` / ``.NAME.old-*``) build the next tree in a temp directory and
rename it into place. A killed run leaves its temp directory behind; only the lock holder may remove it,
since another run's temp directory is in use.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from plumbing.errors import BusyError, ToolError


@contextlib.contextmanager
def exclusive(
    parent: Path, lock_name: str, stale: str, *, busy: str, cannot: Callable[[OSError], ToolError]
) -> Iterator[Path]:
    """Hold ``parent/lock_name`` (created with ``parent``), remove ``stale.new-*`` and ``stale.old-*`` there; yield ``parent``.

    :param stale: the glob of the temp directories' names before ``.new-`` / ``.old-``.
    :param busy: the sentence of the :class:`BusyError` raised when another process holds the lock.
    :param cannot: the error to raise when ``parent`` or the lock file cannot be made.
    """
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(parent / lock_name, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise cannot(exc) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BusyError(busy) from exc
        for left in [*parent.glob(f"{stale}.new-*"), *parent.glob(f"{stale}.old-*")]:
            shutil.rmtree(left, ignore_errors=True)  # left by a killed run; we hold the lock
        yield parent
    finally:
        os.close(fd)  # closing the descriptor releases the flock
