"""Replace a served directory in one step: build beside it, then exchange the two.

``OUT`` stays a real directory (web server configs, the Ansible role and INSTALL.md name it) and
is replaced with ``renameat2(RENAME_EXCHANGE)``: one atomic syscall swaps the new tree in and the
old one out, so a request sees either the complete old tree or the complete new one. Where the
kernel or filesystem lacks RENAME_EXCHANGE (EINVAL/ENOSYS), the fallback renames the old tree aside
and the new one in: two renames, with a window of microseconds in which ``OUT`` does not exist and
a request gets 404 (apt and dnf retry on their next run). A symlink ``OUT -> OUT.d/<version>``
would avoid both, but would make ``OUT`` something other than the directory people configured.

The tree being built is ``.OUT.new-*`` next to ``OUT``; a failed publish removes it, and the next
publish removes any a crashed one left (under ``.OUT.publish-lock``, so never one still in use).
``OUT/.gpu-airgap-publish.json`` marks a tree as ours: an existing non-empty ``OUT`` without it
is refused, so nobody's directory is ever swapped away.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from plumbing.errors import BusyError, ToolError, UsageError
from plumbing.fsutil import fsync_dir

MARKER: Final = ".gpu-airgap-publish.json"
_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2


class PublishTargetError(UsageError):
    """``--output`` names a directory a publish must not replace."""


def check_target(out: Path, mirror: Path) -> None:
    """Refuse an ``out`` that is a file, someone else's non-empty directory, or overlaps the mirror.

    :raises PublishTargetError: naming the reason.
    """
    out_abs, mirror_abs = os.path.realpath(out), os.path.realpath(mirror)
    if _within(out_abs, mirror_abs):
        raise PublishTargetError(
            f"--output {out} is inside the mirror {mirror}; publish to a directory outside it"
        )
    if _within(mirror_abs, out_abs):
        raise PublishTargetError(
            f"--output {out} contains the mirror {mirror}; replacing it would delete the mirror"
        )
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise PublishTargetError(f"--output {out} exists and is not a directory; name a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise PublishTargetError(
            f"--output {out} is a non-empty directory that no `gpu-airgap mirror publish` wrote; "
            "name a new or empty directory"
        )


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """Yield an empty directory beside ``out``; when the block succeeds, swap it in as ``out``.

    The previous ``out`` is served until the swap and removed after it. On any error the new
    tree is removed and ``out`` is left exactly as it was.

    :raises BusyError: when another publish to ``out`` is running.
    """
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(parent / f".{out.name}.publish-lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ToolError(f"cannot publish to {out}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BusyError(f"another publish to {out} is running; wait for it to finish") from exc
        for stale in [*parent.glob(f".{out.name}.new-*"), *parent.glob(f".{out.name}.old-*")]:
            shutil.rmtree(stale, ignore_errors=True)  # left by a crashed publish; we hold the lock
        new = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=parent))
        try:
            new.chmod(0o755)  # served: mkdtemp's 0700 would hide the tree from the web server
            yield new
            _swap_in(new, out)
            fsync_dir(parent)  # the swap survives a crash right after it
        finally:
            shutil.rmtree(new, ignore_errors=True)  # the new tree on failure, the old one after a swap
    finally:
        os.close(lock_fd)


def _swap_in(new: Path, out: Path) -> None:
    """Make ``new`` be ``out``; afterwards ``new`` holds the previous tree (or nothing)."""
    if not out.exists():
        new.rename(out)
        return
    exchange = _renameat2()
    if (
        exchange is not None
        and exchange(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(out), _RENAME_EXCHANGE) == 0
    ):
        return
    err = ctypes.get_errno() if exchange is not None else errno.ENOSYS
    if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        raise ToolError(f"cannot replace {out}: {os.strerror(err)}")
    # No RENAME_EXCHANGE here: old aside, new in (the short window the module docstring describes).
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    out.rename(aside / "tree")
    try:
        new.rename(out)
    except OSError as exc:
        (aside / "tree").rename(out)  # put the previous tree back: a failed publish changes nothing
        aside.rmdir()
        raise ToolError(f"cannot replace {out}: {exc.strerror or exc}") from exc
    aside.rename(new)  # so the caller's cleanup removes the old tree


@functools.cache
def _renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    """libc's renameat2 (glibc >= 2.28), or None."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is None:
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func  # type: ignore[no-any-return]
