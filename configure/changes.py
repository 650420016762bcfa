"""Planned file changes, applied with one backup each and recorded in a journal for ``revert``.

Every configure command works the same way: load the current files, change them in memory,
render the new bytes, and hand a list of :class:`FileChange` to :func:`apply_changes`. Files whose
bytes would not change are never written (a second run says "already configured"). ``--dry-run``
renders :func:`unified_diff` instead of applying.

The journal (``<root>/var/lib/gpu-airgap/configure/journal.json``) lists every write in order with
the backup of the bytes it replaced, so :func:`revert` can restore the state before gpu-airgap's
first change, byte for byte, including files that did not exist (they are removed again).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from plumbing.errors import ConfigFormatError, FileWriteError, ProblemsFound, ToolError
from plumbing.fsutil import atomic_write, rooted

STATE_DIR = "/var/lib/gpu-airgap/configure"


def write_config(path: Path, data: bytes, *, mode: Optional[int] = None) -> None:
    """:func:`~plumbing.fsutil.atomic_write` for a configuration file (or its journal and backups).

    :raises ConfigFormatError: when it cannot be written (exit 5: the configuration cannot be
        changed safely), rather than the general :class:`~plumbing.errors.FileWriteError`.
    """
    try:
        atomic_write(path, data, mode=mode)
    except FileWriteError as exc:
        raise ConfigFormatError(exc.path, exc.detail) from exc


@dataclass(frozen=True)
class FileChange:
    """The complete old and new content of one file (``old`` is None when it does not exist yet)."""

    path: Path  #: the real path on this machine (already mapped under ``--root``)
    old: Optional[bytes]
    new: bytes
    mode: Optional[int] = None  #: permission bits for a new file

    @property
    def changed(self) -> bool:
        """True when writing would change the bytes on disk."""
        return self.old != self.new


@dataclass
class JournalEntry:
    """One applied write: which engine, which file, where its previous bytes are kept."""

    engine: str
    path: str  #: real path
    backup: Optional[str]  #: real path of the copy of the previous bytes; None if the file was new
    sha256: str  #: digest of the bytes we wrote, to notice later edits by others
    time: float
    notes: Dict[str, Any] = field(default_factory=dict)  #: e.g. {"previous_default": "runc"}
    mode: Optional[int] = None  #: permission bits of the file before the write


def read_optional(path: Path) -> Optional[bytes]:
    """Return the bytes of ``path`` or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise ConfigFormatError(path, "is a directory, not a file") from exc
    except OSError as exc:
        raise ConfigFormatError(path, f"cannot read: {exc.strerror or exc}") from exc


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
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in chunks)


class Journal:
    """The append-only record of writes under one root, with their backups."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = rooted(root, STATE_DIR)
        self.path = self.directory / "journal.json"

    def entries(self) -> List[JournalEntry]:
        """All recorded writes, oldest first."""
        raw = read_optional(self.path)
        if raw is None:
            return []
        try:
            return [JournalEntry(**item) for item in json.loads(raw)["entries"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigFormatError(self.path, "the configure journal is corrupt") from exc

    def _save(self, entries: Sequence[JournalEntry]) -> None:
        data = {"schema": 1, "entries": [asdict(e) for e in entries]}
        write_config(self.path, (json.dumps(data, indent=2) + "\n").encode(), mode=0o600)

    def record(self, engine: str, change: FileChange, notes: Optional[Dict[str, Any]] = None) -> None:
        """Back up the previous bytes of ``change.path``, then record the write (call before writing)."""
        backup: Optional[str] = None
        mode: Optional[int] = None
        if change.old is not None:
            mode = change.path.stat().st_mode & 0o7777
            stamp = time.strftime("%Y%m%dT%H%M%S")
            backup_dir = self.directory / "backups"
            n = len(self.entries())
            target = backup_dir / f"{stamp}-{n:04d}-{change.path.name}"
            write_config(target, change.old, mode=0o600)
            backup = str(target)
        entry = JournalEntry(
            engine=engine,
            path=str(change.path),
            backup=backup,
            sha256=hashlib.sha256(change.new).hexdigest(),
            time=time.time(),
            notes=dict(notes or {}),
            mode=mode,
        )
        self._save([*self.entries(), entry])

    def forget(self, engine: str) -> None:
        """Drop the entries of ``engine`` (after a successful revert)."""
        self._save([e for e in self.entries() if e.engine != engine])


def apply_changes(
    engine: str, changes: Sequence[FileChange], journal: Journal, notes: Optional[Dict[str, Any]] = None
) -> List[Path]:
    """Write every changed file atomically, each after its backup is journaled; return what was written."""
    written: List[Path] = []
    for change in changes:
        if not change.changed:
            continue
        journal.record(engine, change, notes)
        write_config(change.path, change.new, mode=change.mode)
        written.append(change.path)
    return written


def revert(engine: str, journal: Journal, *, force: bool = False) -> List[Path]:
    """Restore every file ``engine`` changed to its bytes before gpu-airgap's first change.

    :param force: restore even files someone edited after our last write (their edits are lost).
    :raises ProblemsFound: listing every file edited since, unless ``force``.
    :raises ToolError: when there is nothing to revert.
    """
    entries = [e for e in journal.entries() if e.engine == engine]
    if not entries:
        raise ToolError(f"nothing to revert: gpu-airgap has not changed any {engine} configuration here")
    first: Dict[str, JournalEntry] = {}
    last: Dict[str, JournalEntry] = {}
    for entry in entries:
        first.setdefault(entry.path, entry)
        last[entry.path] = entry
    problems = []
    for path, entry in last.items():
        current = read_optional(Path(path))
        if current is not None and hashlib.sha256(current).hexdigest() != entry.sha256:
            problems.append(f"{path} was edited after gpu-airgap wrote it (use --force to restore anyway)")
    if problems and not force:
        raise ProblemsFound("refusing to revert", problems)
    restored: List[Path] = []
    for path, entry in first.items():
        target = Path(path)
        if entry.backup is None:
            target.unlink(missing_ok=True)
            restored.append(target)
            continue
        data = read_optional(Path(entry.backup))
        if data is None:
            raise ToolError(f"the backup {entry.backup} of {path} is missing; cannot restore it")
        # An existing file keeps its owner and mode; a deleted one gets the mode it had.
        write_config(target, data, mode=entry.mode)
        restored.append(target)
    journal.forget(engine)
    return restored
