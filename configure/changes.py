"""Planned file changes: the complete old and new bytes of each file, read, diffed and written.

Every configure command works the same way: load the current files, change them in memory,
render the new bytes, and hand a list of :class:`FileChange` to
:func:`configure.journal.apply_changes`, which journals a backup of each before writing it. Files
whose bytes would not change are never written (a second run says "already configured").
``--dry-run`` renders :func:`unified_diff` instead of applying. :mod:`configure.revert` puts the
bytes back.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from plumbing.errors import ConfigFormatError, FileWriteError
from plumbing.fsutil import atomic_write, read_regular, require_writer, why_unwritable

STATE_DIR = "/var/lib/gpu-airgap/configure"


def write_config(path: Path, data: bytes, *, mode: Optional[int] = None) -> None:
    """:func:`~plumbing.fsutil.atomic_write` for a configuration file (or its journal and backups).

    :raises ConfigFormatError: when it cannot be written (exit 5: the configuration cannot be
        changed safely), rather than the general :class:`~plumbing.errors.FileWriteError`.
    """
    try:
        atomic_write(path, data, mode=mode)
    except FileWriteError as exc:
        # Say why in the words the checks before the write use (immutable, read-only mount, ...).
        raise ConfigFormatError(exc.path, why_unwritable(path) or exc.detail) from exc


def check_writable(paths: Sequence[Path]) -> None:
    """Refuse before the first write when any of ``paths`` could not be written (nothing is changed).

    :raises NotRoot: when only root could write one and this process is not root (exit 12).
    :raises ConfigFormatError: naming the first file and why (immutable, read-only mount, permissions).
    """
    for path in paths:
        require_writer(path)
        reason = why_unwritable(path)
        if reason is not None:
            raise ConfigFormatError(path, reason)


@dataclass(frozen=True)
class FileChange:
    """The complete old and new content of one file (``old`` is None when it does not exist yet)."""

    path: Path  #: the real path on this machine (already mapped under ``--root``)
    old: Optional[bytes]
    new: bytes
    mode: Optional[int] = None  #: permission bits for a new file
    owner: Optional[Tuple[int, int]] = (
        None  #: (uid, gid) of a new file and the directories made for it (a user's ~/.config)
    )

    @property
    def changed(self) -> bool:
        """True when writing would change the bytes on disk."""
        return self.old != self.new


def read_optional(path: Path) -> Optional[bytes]:
    """Return the bytes of ``path`` or None when it does not exist (:func:`~plumbing.fsutil.read_regular`).

    :raises ConfigFormatError: for a directory, FIFO, socket or device, or a file that cannot be read.
    """
    return read_regular(path)


def json_change(path: Path, data: Dict[str, Any], owner: Optional[Tuple[int, int]] = None) -> FileChange:
    """The change that makes ``path`` hold ``data``; an equal file (other formatting) is left alone."""
    old = read_optional(path)
    new = (json.dumps(data, indent=2) + "\n").encode()
    if old is not None:
        try:
            if json.loads(old) == data:
                new = old
        except ValueError:
            pass
    return FileChange(path, old, new, mode=0o644, owner=owner)


def unified_diff(changes: Sequence[FileChange]) -> str:
    """Render the changes as one unified diff (what ``--dry-run`` prints)."""
    chunks: List[str] = []
    for change in changes:
        if not change.changed:
            continue
        old = (change.old or b"").decode("utf-8", "replace").splitlines(keepends=True)
        new = change.new.decode("utf-8", "replace").splitlines(keepends=True)
        fromfile = str(change.path) if change.old is not None else "/dev/null"
        chunks.extend(difflib.unified_diff(old, new, fromfile=fromfile, tofile=str(change.path)))
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in chunks
    )
