"""Every file write of gpu-airgap goes through here: atomic, owner- and mode-preserving, contained.

The write discipline: render the whole new content in memory, write it to a temporary file in the
same directory, fsync, copy the old file's owner and mode, then ``os.replace`` over the target and
fsync the directory. A crash leaves either the old file or the new one, never a truncated mix.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Optional, Union

from plumbing.errors import FileWriteError, UnsafePathError


def safe_join(root: Union[str, os.PathLike[str]], relative: str) -> Path:
    """Join ``relative`` (from metadata or an archive) under ``root``, refusing any escape.

    ``os.path.abspath`` normalises ``..`` without touching the disk; ``resolve()`` is avoided on
    purpose because it would follow symlinks that an attacker may have planted inside ``root``.

    :param root: the directory everything must stay under.
    :param relative: a relative POSIX path such as ``./pkg_1.0_amd64.deb``.
    :raises UnsafePathError: for absolute paths, ``..`` escapes, empty names or NUL bytes.
    """
    if not relative or "\x00" in relative or PurePosixPath(relative).is_absolute() or "\\" in relative:
        raise UnsafePathError(relative, root)
    base = os.path.abspath(root)
    joined = os.path.abspath(os.path.join(base, relative))
    if joined == base or not joined.startswith(base + os.sep):
        raise UnsafePathError(relative, root)
    return Path(joined)


def is_live_root(root: Union[str, os.PathLike[str]]) -> bool:
    """True when ``--root`` names the running system itself (``/``, or a path that resolves to it).

    Only then may gpu-airgap run the node's own binaries, restart services or use host defaults;
    under any other root those belong to an image or chroot, not to us.
    """
    return str(root) in ("", "/") or os.path.realpath(root) == "/"


def rooted(root: Union[str, os.PathLike[str]], system_path: str) -> Path:
    """Map an absolute node path (``/etc/containerd/config.toml``) under ``--root`` (like ``dpkg --root``)."""
    return Path(system_path) if is_live_root(root) else safe_join(root, system_path.lstrip("/"))


def atomic_write(path: Path, data: bytes, *, mode: Optional[int] = None) -> None:
    """Replace ``path`` with ``data`` atomically, keeping the old file's owner and mode.

    :param path: the target; its parent directories are created (0755) when missing.
    :param data: the complete new content.
    :param mode: permission bits for a new file (default 0644); an existing file keeps its own.
    :raises FileWriteError: when the target cannot be written (read-only, not a directory, ...).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        old = path.stat() if path.exists() else None
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise FileWriteError(path, f"cannot write: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if old is not None:
            os.chmod(tmp, old.st_mode & 0o7777)
            with contextlib.suppress(PermissionError):
                os.chown(tmp, old.st_uid, old.st_gid)
        else:
            os.chmod(tmp, 0o644 if mode is None else mode)
        if old is not None and not os.access(path, os.W_OK) and os.geteuid() != 0:
            raise FileWriteError(path, "the file is read-only")
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        _unlink_quietly(Path(tmp))
        raise FileWriteError(path, f"cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        _unlink_quietly(Path(tmp))
        raise


def fsync_dir(directory: Path) -> None:
    """Make a rename inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
