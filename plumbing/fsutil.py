"""Every file write of gpu-airgap goes through here: atomic, owner- and mode-preserving, contained.

The write discipline: render the whole new content in memory, write it to a temporary file in the
same directory, fsync, copy the old file's owner and mode, then ``os.replace`` over the target and
fsync the directory. A crash leaves either the old file or the new one, never a truncated mix.

Node paths are mapped under ``--root`` by :func:`rooted`, which resolves symbolic links the way the
node itself would (an absolute link target is a node path), so a write lands on a link's target and
the link stays. :func:`why_unwritable` tells, without changing anything, why a write would fail.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import platform
import posixpath
import stat
import struct
import tempfile
from pathlib import Path, PurePosixPath
from typing import List, Optional, Union

from plumbing.errors import (
    ConfigFormatError,
    FileWriteError,
    NoSpaceError,
    NotRoot,
    UnsafePathError,
)

#: a path with more links than this is refused, as the kernel does (ELOOP after 40)
MAX_LINKS = 40
#: inode flags (``chattr``): no change at all / appends only; either way a file cannot be replaced
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20


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
    """Map an absolute node path (``/etc/containerd/config.toml``) under ``--root`` (like ``dpkg --root``).

    Symbolic links on the way are followed as the node follows them: on the running system as they
    are, under another root inside it (see :func:`resolve_in_root`). The result names the file
    itself, so reading it never leaves the root and writing it keeps the link.

    :raises ConfigFormatError: for a link that leads outside the root, or a link loop.
    """
    if is_live_root(root):
        return Path(os.path.realpath(system_path))
    return resolve_in_root(root, safe_join(root, system_path.lstrip("/")))


def rooted_or_none(root: Union[str, os.PathLike[str]], system_path: str) -> Optional[Path]:
    """:func:`rooted`, or None where a link leads out of the root (no file of the node, for a reader)."""
    try:
        return rooted(root, system_path)
    except (ConfigFormatError, UnsafePathError):
        return None


def is_node_path(path: object) -> bool:
    """True for an absolute, normalised node path (``/etc/containerd/config.toml``): no ``..``, no NUL."""
    return (
        isinstance(path, str)
        and path.startswith("/")
        and not path.startswith("//")
        and "\x00" not in path
        and posixpath.normpath(path) == path
    )


def recorded_path(root: Union[str, os.PathLike[str]], node_path: object, record: object) -> Path:
    """A node path read from one of gpu-airgap's records (``record``), mapped under ``root``: never a file outside it.

    Records name node paths, so a copied or moved root (or the image booted as ``/``) acts on its
    own files; a record that names anything else is refused rather than followed.

    :raises ConfigFormatError: naming ``record``, for a path that is not a node path or a link on
        its way that leads outside ``root``.
    """
    if not is_node_path(node_path):
        raise ConfigFormatError(
            record,
            f"names {node_path!r}, which would land outside {root}; refusing to act on it "
            "(gpu-airgap records only paths under the root, such as /etc/containerd/config.toml)",
        )
    return rooted(root, str(node_path))


def node_path_of(root: Union[str, os.PathLike[str]], path: Path) -> Optional[str]:
    """The node path of ``path``, a file under ``root`` (what records store); None when it is outside ``root``."""
    if is_live_root(root):
        return os.path.abspath(path)
    base = os.path.abspath(root)
    full = os.path.abspath(path)
    if not full.startswith(base + os.sep):
        return None
    return "/" + full[len(base) + 1 :]


def resolve_in_root(root: Union[str, os.PathLike[str]], path: Path) -> Path:
    """``path`` (lexically under ``root``) with every symbolic link resolved inside ``root``.

    An absolute link target is a node path, so it is mapped under ``root`` (as in a chroot); a
    relative one is taken from the link's directory. A link whose target climbs above ``root`` is
    refused: following it would read or write a file of the host. Missing components are kept as
    they are (the file may be about to be created).

    :raises ConfigFormatError: naming the link that leads outside ``root``, or for a link loop.
    """
    base = Path(os.path.abspath(root))
    pending: List[str] = list(Path(os.path.abspath(path)).relative_to(base).parts)
    current = base
    links = 0
    link: Optional[Path] = None  # the last link followed, named when its target escapes
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if current == base:
                shown = link.readlink() if link else path
                raise ConfigFormatError(
                    link or path,
                    f"is a symbolic link to {shown}, which leads outside {base}; refusing to follow it",
                )
            current = current.parent
            continue
        candidate = current / part
        if not candidate.is_symlink():
            current = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            raise ConfigFormatError(path, "has too many levels of symbolic links")
        link = candidate
        target = str(candidate.readlink())
        if target.startswith("/"):
            current = base
        pending[:0] = list(
            PurePosixPath(target).parts[1:] if target.startswith("/") else PurePosixPath(target).parts
        )
    return current


#: what a node file that is not a regular file is, in the words of ``ls -l``/``stat``
_FILE_TYPES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_type(mode: int) -> str:
    """What ``mode`` (``st_mode``) says the file is: "a FIFO (named pipe)", "a directory", ..."""
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def read_regular(path: Path) -> Optional[bytes]:
    """The bytes of the regular file ``path`` (links followed), or None when it does not exist.

    Every reader of node configuration and state goes through here. The open never blocks
    (``O_NONBLOCK``: a FIFO planted at ``config.toml`` would otherwise wait for a writer forever),
    and ``fstat`` on the opened file decides, so a swap between a check and the open changes nothing.

    :raises ConfigFormatError: naming the file and what it is when it is not a regular file, or
        why it cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY + os.O_NONBLOCK)  # distinct bits: + is |
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a parent is a file, so no such path
        return None
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ENXIO):  # ENXIO: a socket cannot be opened at all
            raise _not_regular(path, path.stat().st_mode) from exc
        raise ConfigFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        with open(fd, "rb", buffering=0, closefd=False) as handle:
            return handle.read()  # sized from fstat: one buffer, however big the file
    except OSError as exc:
        raise ConfigFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _not_regular(path: Path, mode: int) -> ConfigFormatError:
    if stat.S_ISDIR(mode):
        return ConfigFormatError(path, "is a directory, not a file")
    return ConfigFormatError(
        path, f"is {file_type(mode)}, not a regular file; remove it or put the file back"
    )


def inode_flags(path: Path) -> int:
    """The file's ``chattr`` flags (``FS_IOC_GETFLAGS``), or 0 when the filesystem has none."""
    size = struct.calcsize("l")
    # _IOR('f', 1, long): the direction bits sit higher on powerpc, mips and sparc
    direction = (2 << 29) if platform.machine().startswith(("ppc", "mips", "sparc", "alpha")) else (2 << 30)
    request = direction + (size << 16) + (ord("f") << 8) + 1  # distinct bits: + is |, which vermin misreads
    try:
        fd = os.open(path, os.O_RDONLY + os.O_NONBLOCK + os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        buffer = bytearray(size)
        fcntl.ioctl(fd, request, buffer, True)
        return int(struct.unpack("i", bytes(buffer[:4]))[0])  # the kernel writes an int
    except OSError:
        return 0
    finally:
        os.close(fd)


def why_unwritable(path: Path) -> Optional[str]:
    """Why :func:`atomic_write` could not write ``path``, as the rest of a sentence after the path; None if it can.

    Reads only: the immutable and append-only flags of the file and its directory, a read-only
    mount (``statvfs``), and the permissions this process has on both. A missing directory is
    judged by the nearest one that exists, since :func:`atomic_write` creates the rest.
    """
    directory = path.parent
    while not os.path.lexists(directory):
        directory = directory.parent
    if not directory.is_dir():
        return f"cannot be written: {directory} is not a directory"
    exists = os.path.lexists(path)
    if exists and path.is_dir():
        return "is a directory, not a file"
    flags = inode_flags(path) if exists else 0
    if flags & FS_IMMUTABLE_FL:
        return "cannot be changed: it is immutable (chattr +i); clear the flag with chattr -i first"
    if flags & FS_APPEND_FL:
        return "cannot be changed: it is append-only (chattr +a); clear the flag with chattr -a first"
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        return "cannot be written: it is on a read-only filesystem"
    if exists and not os.access(path, os.W_OK):
        return f"is read-only for this user (mode {stat.S_IMODE(path.stat().st_mode):04o}); run as root or make it writable"
    if inode_flags(directory) & (FS_IMMUTABLE_FL + FS_APPEND_FL):
        return f"cannot be written: the directory {directory} is immutable or append-only (chattr); clear the flag first"
    if not os.access(directory, os.W_OK + os.X_OK):
        mode = stat.S_IMODE(directory.stat().st_mode)
        return f"cannot be written: the directory {directory} is not writable (mode {mode:04o}) for this user"
    return None


def require_writer(path: Path) -> None:
    """Refuse, before anything changes, to write ``path`` when only root could and this process is not root.

    "Only root could": the permission bits of a file or directory someone else owns stop this user,
    on a writable mount (a read-only mount or a chattr flag stops root too, and a read-only file of
    the user's own is theirs to fix; :func:`why_unwritable` names those). A directory of the user's
    own (``--root DIR``) passes: the command then runs without root as far as its files go.

    :raises NotRoot: naming ``path`` and the user (exit 12).
    """
    if os.geteuid() == 0:
        return
    directory = path
    if not path.is_dir():  # a file: written through its directory (or the nearest one that exists)
        directory = path.parent
        while not os.path.lexists(directory):
            directory = directory.parent
    if os.path.lexists(path) and not os.access(path, os.W_OK):
        blocker = path
    elif not os.access(directory, os.W_OK + os.X_OK):
        blocker = directory
    else:
        return
    # a file or directory of the user's own with its write bit off is theirs to fix (why_unwritable says so)
    if blocker.lstat().st_uid != os.geteuid() and not os.statvfs(directory).f_flag & os.ST_RDONLY:
        raise NotRoot(path, _user())


def _user() -> str:
    import pwd  # POSIX only, like the rest of the node side; imported where it is needed

    try:
        return f"user {pwd.getpwuid(os.geteuid()).pw_name}"
    except KeyError:
        return f"uid {os.geteuid()}"


def atomic_write(path: Path, data: bytes, *, mode: Optional[int] = None) -> None:
    """Replace ``path`` with ``data`` atomically, keeping the old file's owner and mode.

    :param path: the target; its parent directories are created (0755) when missing.
    :param data: the complete new content.
    :param mode: permission bits for a new file (default 0644); an existing file keeps its own.
    :raises NoSpaceError: when the filesystem is full (bytes or inodes) or a quota is exhausted.
    :raises FileWriteError: when the target cannot be written otherwise (read-only, not a directory, ...).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        old = path.stat() if path.exists() else None
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from exc
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
        raise write_error(path, exc) from exc
    except BaseException:
        _unlink_quietly(Path(tmp))
        raise


def write_error(path: Path, exc: OSError) -> Union[FileWriteError, NoSpaceError, NotRoot]:
    """The error to raise for ``exc``, a failed write of ``path``: no space, not root, or the reason."""
    if NoSpaceError.matches(exc):
        return NoSpaceError(path)
    if exc.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
        return NotRoot(path, _user())
    return FileWriteError(path, f"cannot write: {exc.strerror or exc}")


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
