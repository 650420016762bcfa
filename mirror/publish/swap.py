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
The tree a publish replaced is kept as ``.OUT.previous`` (hard links, so it costs little space) and
:func:`rollback` exchanges the two the same atomic way: a rollback is its own undo.
``OUT/.gpu-airgap-publish.json`` marks a tree as ours: an existing non-empty ``OUT`` without it
is refused, so nobody's directory is ever swapped away.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from mirror.disk import worklock
from plumbing.errors import ToolError, UsageError
from plumbing.fsutil import fsync_dir

MARKER: Final = ".gpu-airgap-publish.json"
PREVIOUS: Final = ".{}.previous"
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


def previous(out: Path) -> Path:
    """Where the tree the last publish to ``out`` replaced is kept."""
    return out.parent / PREVIOUS.format(out.name)


def _publish_lock(out: Path) -> contextlib.AbstractContextManager[Path]:
    """Hold ``.OUT.publish-lock``, remove what a crashed publish left, and yield ``out``'s parent."""
    return worklock.exclusive(
        out.parent,
        f".{out.name}.publish-lock",
        f".{out.name}",
        busy=f"another publish to {out} is running; wait for it to finish",
        cannot=lambda exc: ToolError(f"cannot publish to {out}: {exc.strerror or exc}"),
    )


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """Yield an empty directory beside ``out``; when the block succeeds, swap it in as ``out``.

    The previous ``out`` is served until the swap and kept as :func:`previous` after it (the one
    kept before is removed). On any error the new tree is removed and ``out`` is left exactly as it was.

    :raises BusyError: when another publish to ``out`` is running.
    """
    with _publish_lock(out) as parent:
        new = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=parent))
        try:
            new.chmod(0o755)  # served: mkdtemp's 0700 would hide the tree from the web server
            yield new
            kept = previous(out)
            if kept.exists():  # aside first: a crash below leaves no rollback target rather than a wrong one
                kept.rename(Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent)) / "tree")
            had_tree = out.exists()
            _swap_in(new, out)
            if had_tree:
                new.rename(kept)
            fsync_dir(parent)  # the swap survives a crash right after it
        finally:
            shutil.rmtree(new, ignore_errors=True)  # the new tree on failure
            for old in parent.glob(f".{out.name}.old-*"):
                shutil.rmtree(old, ignore_errors=True)


def rollback(out: Path, prepare: Callable[[Path], object] | None = None) -> None:
    """Serve the tree the last publish to ``out`` replaced again, in one atomic exchange.

    Afterwards :func:`previous` holds the tree that was served, so a second rollback undoes the first.
    ``prepare`` gets the kept tree under the publish lock before it is served (signing its indexes
    again, :mod:`mirror.publish.redate`); when it raises, nothing is swapped.

    :raises PublishTargetError: when ``out`` or the kept tree is missing or not a publish's tree.
    """
    kept = previous(out)
    with _publish_lock(out) as parent:
        for tree, what in ((out, f"--output {out}"), (kept, f"the tree a publish to {out} replaced")):
            if not (tree / MARKER).is_file():
                raise PublishTargetError(
                    f"cannot roll back {out}: {what} is not there (only a publish that replaced a tree keeps one)"
                )
        if prepare is not None:
            prepare(kept)
        _freshen(kept, out)
        _swap_in(kept, out)  # kept now holds the tree that was served
        fsync_dir(parent)


def _freshen(tree: Path, served: Path) -> None:
    """Date the indexes of ``tree`` after those of ``served`` (the tree it replaces), before it is served again.

    Its files are older than the ones clients fetched from ``served``; a web server that answers
    If-Modified-Since with "not modified" for any file not newer (Apache, Python's http.server)
    would keep every apt and dnf on the newer indexes. Last-Modified has whole seconds, so the new
    time is at least a second past ``served``'s newest. Packages are left alone: nodes fetch them
    by the name the index gives, and they are links of the mirror's files.
    """
    indexes = [p for p in tree.rglob("*") if p.is_file() and p.suffix not in (".deb", ".rpm")]
    newest = max(
        (p.stat().st_mtime for p in served.rglob("*") if p.is_file() and p.suffix not in (".deb", ".rpm")),
        default=0.0,
    )
    stamp = max(time.time(), newest + 1)
    for path in indexes:
        os.utime(path, (stamp, stamp))


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
    (aside / "tree").rename(new)  # so ``new`` holds the previous tree, as after an exchange
    aside.rmdir()


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
