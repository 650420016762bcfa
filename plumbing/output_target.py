"""``--output`` targets: a file replaced atomically, or a stream (a device, a pipe) written through.

``bundle build``, ``bundle pull``, ``fleet k8s`` and ``fleet image`` write what ``--output`` names
with :func:`write_output` or :func:`output_path`; a target that is ``/dev/null``, ``/dev/stdout``
or a FIFO must stay what it is (#24.9), so :func:`output_is_stream` decides which way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from plumbing import fsutil
from plumbing.errors import UsageError


def output_is_stream(path: Path, option: str = "--output") -> bool:
    """Whether ``--output`` names a stream to write through rather than a file to replace atomically.

    A character device (``/dev/null``) or a pipe (``/dev/stdout`` when it is piped, a FIFO, bash's
    ``>(…)``), or a symbolic link to one, is a stream: replacing it with a regular file would break
    the device or the pipe, so the bytes are written into it. A regular file, a link to one, or a
    name that does not exist yet is a file. Anything else has no sensible meaning as an output.

    :raises UsageError: a directory, a block device or a socket, naming what it is.
    """
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        return False  # a new file, or a dangling link (replaced like a file)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise  # the command line's handler says it in one sentence, for every option
        raise UsageError(f"{option} {path} cannot be used: {exc.strerror or exc}") from exc
    if stat.S_ISREG(mode):
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    raise UsageError(
        f"{option} {path} is {fsutil.file_type(mode)}; name a file, a character device such as /dev/null, or a pipe"
    )


def output_is_stdout(path: Path) -> bool:
    """True when ``path`` is this process's stdout (``/dev/stdout``, or the file or pipe it points at)."""
    try:
        target, ours = Path(path).stat(), os.fstat(1)
    except OSError:
        return False
    return (target.st_dev, target.st_ino) == (ours.st_dev, ours.st_ino)


def write_output(path: Path, data: bytes, option: str = "--output") -> None:
    """Write an ``--output`` of a command: through a stream (see :func:`output_is_stream`), else atomically.

    :raises UsageError: a target that is neither a file nor a stream.
    :raises FileWriteError | NoSpaceError: the write failed.
    """
    if not output_is_stream(path, option):
        fsutil.atomic_write(path, data)
        return
    try:
        with _open_stream(path) as stream:
            stream.write(data)
    except OSError as exc:
        raise fsutil.write_error(path, exc) from exc


def _open_stream(path: Path) -> BinaryIO:
    """``path`` opened for writing; our own stdout through its descriptor (reopening a pipe by name may be denied)."""
    if output_is_stdout(path):
        sys.stdout.flush()
        return os.fdopen(os.dup(1), "wb")
    return open(path, "wb")


@contextlib.contextmanager
def output_path(path: Path, option: str = "--output") -> Iterator[Path]:
    """Where a writer that renames its files into place (a bundle, a pull) should write ``--output``.

    For a file that is ``path`` itself. For a stream it is a file of the same name in a private
    temporary directory, copied into the stream once the block succeeds (so a failed build sends
    nothing) and removed either way.

    :raises UsageError: a target that is neither a file nor a stream.
    """
    if not output_is_stream(path, option):
        yield path
        return
    work = Path(tempfile.mkdtemp(prefix=".gpu-airgap-output-"))
    try:
        staged = work / path.name
        yield staged
        try:
            with open(staged, "rb") as source, _open_stream(path) as stream:
                shutil.copyfileobj(source, stream, 1 << 20)
        except OSError as exc:
            raise fsutil.write_error(path, exc) from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
