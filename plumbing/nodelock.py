"""The per-root node lock: one gpu-airgap process changes a node root at a time.

install, uninstall, restart and every ``configure`` command that writes hold :func:`node_lock`
for their whole run, reading included: two ``configure containerd`` runs that both read
``config.toml`` before either wrote it would each write back only their own runtime. It is an
``flock`` on the root directory itself (``/`` on the running system): it exists before anything
is written, needs no write permission (a user's run that changes nothing is not refused for want
of a state directory), goes with the process however the process ends, and leaves no file behind.

A second run waits for the first (up to :data:`LOCK_WAIT` seconds, or ``GPU_AIRGAP_LOCK_WAIT``),
then refuses with :class:`~plumbing.errors.BusyError` (exit 8) naming the process that holds it.
A process that already holds the lock of a root may take it again (nested calls); only the
outermost releases it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from plumbing.errors import BusyError, ConfigFormatError, UsageError

#: how long a second run waits for the lock by default (seconds); GPU_AIRGAP_LOCK_WAIT overrides it
LOCK_WAIT = 60.0
LOCK_WAIT_VARIABLE = "GPU_AIRGAP_LOCK_WAIT"
#: how often a waiting run tries again (seconds)
POLL = 0.05

#: (device, inode) of the roots this process holds the lock of -> nesting depth
_HELD: Dict[Tuple[int, int], int] = {}


def lock_wait() -> float:
    """Seconds to wait for the lock: ``GPU_AIRGAP_LOCK_WAIT`` when set, else :data:`LOCK_WAIT`.

    :raises UsageError: for a value that is not a number of seconds >= 0.
    """
    raw = os.environ.get(LOCK_WAIT_VARIABLE)
    if raw is None or raw == "":
        return LOCK_WAIT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise UsageError(f"{LOCK_WAIT_VARIABLE} must be a number of seconds (0 or more), not {raw!r}")
    return seconds


@contextlib.contextmanager
def node_lock(
    root: Path,
    *,
    wait: Optional[float] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold the lock of ``root`` for the ``with`` block, waiting up to ``wait`` seconds for another holder.

    :param wait: seconds to wait for another holder; :func:`lock_wait` when None.
    :raises BusyError: when another process still holds it after ``wait`` seconds, naming its pid.
    :raises ConfigFormatError: when ``root`` cannot be opened as a directory.
    """
    seconds = lock_wait() if wait is None else wait
    try:
        fd = os.open(root, os.O_RDONLY + os.O_DIRECTORY)  # distinct bits: + is |
    except OSError as exc:
        raise ConfigFormatError(root, f"cannot be locked: {exc.strerror or exc}") from exc
    info = os.fstat(fd)
    key = (info.st_dev, info.st_ino)
    try:
        if key not in _HELD:
            _acquire(fd, root, seconds, clock, sleep)
        _HELD[key] = _HELD.get(key, 0) + 1
        try:
            yield
        finally:
            _HELD[key] -= 1
            if not _HELD[key]:
                del _HELD[key]
    finally:
        os.close(fd)  # the outermost holder's descriptor: closing it releases the flock


def _acquire(
    fd: int, root: Path, seconds: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    deadline = clock() + seconds
    while True:
        try:
            # distinct bits, so + is |; vermin's union-types check misreads a | between attributes
            fcntl.flock(fd, fcntl.LOCK_EX + fcntl.LOCK_NB)
            return
        except BlockingIOError:
            now = clock()
            if now >= deadline:
                break
            sleep(min(POLL, deadline - now))
    holder = lock_holder(fd)
    who = f"another gpu-airgap process (pid {holder})" if holder else "another gpu-airgap process"
    raise BusyError(
        f"{who} is working on {root} and still held its lock after {seconds:g} s; "
        f"try again when it finishes (or set {LOCK_WAIT_VARIABLE} to wait longer)"
    )


def lock_holder(fd: int) -> Optional[int]:
    """The pid holding an flock on the file open as ``fd``, from ``/proc/locks``; None when unknown."""
    info = os.fstat(fd)
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return None
    by_inode: List[int] = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; a waiter's line has "->" after the number
        if len(fields) < 6 or fields[1] != "FLOCK" or not fields[4].isdigit():
            continue
        if fields[5] == device:
            return int(fields[4]) or None
        if fields[5].rsplit(":", 1)[-1] == str(info.st_ino):
            by_inode.append(int(fields[4]))
    # overlayfs and some others show another device number there; an inode seen once is still ours
    return (by_inode[0] or None) if len(by_inode) == 1 else None
