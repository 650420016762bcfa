"""The journal of configure's writes: one backup per write, applied all or nothing, undone exactly.

The journal (``<root>/var/lib/gpu-airgap/configure/journal.json``) lists every write in order with
the backup of the bytes it replaced and the directories it had to create, so a revert
(:mod:`configure.revert`) can restore the state before gpu-airgap's first change, byte for byte,
including files that did not exist (they are removed again, with their new directories). An
install run that fails rolls back only its own writes (:meth:`Journal.mark` and
:meth:`Journal.undo_since`); both ways of undoing decide per file with :func:`restores_of` and
carry it out with :func:`put_back`.

Every path in the journal is a node path (``/etc/containerd/config.toml``), resolved under the
current ``--root`` when used: a copied or moved root, or the image booted as ``/``, acts on its own
files. Journals of older versions recorded host paths (``/build/img/etc/...``); they are read by
taking off the root they were recorded under (:mod:`configure.legacy_records`). A path that would
land outside the root is refused, whatever the journal says.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from configure import lineedits
from configure.changes import STATE_DIR, FileChange, check_writable, read_optional, write_config
from configure.legacy_records import from_legacy, legacy_roots
from plumbing.errors import ConfigFormatError, ToolError
from plumbing.fsutil import node_path_of, recorded_path, rooted

#: the journal schema whose paths are node paths (schema 1 recorded host paths, with the root's prefix)
SCHEMA = 2


@dataclass
class JournalEntry:
    """One applied write: which engine, which file, where its previous bytes are kept."""

    engine: str
    path: str  #: node path
    backup: Optional[str]  #: node path of the copy of the previous bytes; None if the file was new
    sha256: str  #: digest of the bytes we wrote, to notice later edits by others
    time: float
    notes: Dict[str, Any] = field(default_factory=dict)  #: e.g. {"previous_default": "runc"}
    mode: Optional[int] = None  #: permission bits of the file before the write
    #: node paths of the directories this write created, deepest first
    created: List[str] = field(default_factory=list)
    #: a revert already put the file back (a revert that was killed skips it when run again)
    restored: bool = False

    def paths(self) -> List[Any]:
        """Every path the entry names (what must stay under the root)."""
        return [self.path, *([self.backup] if self.backup is not None else []), *self.created]


@dataclass(frozen=True)
class JournalMark:
    """The journal as it was at one moment (:meth:`Journal.mark`), to undo what came after."""

    count: int  #: entries then
    raw: Optional[bytes]  #: the journal file's bytes then (None: absent)
    existed: Tuple[bool, bool]  #: whether the journal directory and its backups directory existed


class Journal:
    """The append-only record of writes under one root, with their backups."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = rooted(root, STATE_DIR)
        self.path = self.directory / "journal.json"
        self.backups = self.directory / "backups"

    def files(self) -> List[Path]:
        """What recording a write writes: the journal and a backup (to check before writing)."""
        return [self.path, self.backups / "backup"]

    def entries(self) -> List[JournalEntry]:
        """All recorded writes, oldest first, with node paths.

        :raises ConfigFormatError: for a corrupt journal, or one naming a path outside the root.
        """
        raw = read_optional(self.path)
        if raw is None:
            return []
        try:
            data = json.loads(raw)
            entries = [JournalEntry(**item) for item in data["entries"]]
            schema = data.get("schema", 1)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigFormatError(self.path, "the configure journal is corrupt") from exc
        if schema != SCHEMA:
            entries = self._from_legacy(entries)
        for entry in entries:
            for path in entry.paths():
                self.host(path)  # refuses a path outside the root before anyone acts on it
        return entries

    def _from_legacy(self, entries: List[JournalEntry]) -> List[JournalEntry]:
        """Entries of an older journal (host paths) with node paths: each without the root it was recorded under."""
        for entry, old in zip(entries, legacy_roots([entry.backup for entry in entries], self.root)):
            entry.path = from_legacy(entry.path, old, self.path)
            entry.backup = None if entry.backup is None else from_legacy(entry.backup, old, self.path)
            entry.created = [from_legacy(d, old, self.path) for d in entry.created]
        return entries

    def host(self, node_path: object) -> Path:
        """Where the recorded ``node_path`` is under this root.

        :raises ConfigFormatError: when it would land outside the root.
        """
        return recorded_path(self.root, node_path, self.path)

    def node(self, path: Path) -> str:
        """The node path to record for ``path``, a file under this root.

        :raises ConfigFormatError: when ``path`` is outside the root (gpu-airgap records and changes nothing there).
        """
        node = node_path_of(self.root, path)
        if node is None:
            raise ConfigFormatError(
                path, f"is outside {self.root}; gpu-airgap changes only files under the root"
            )
        return node

    def _save(self, entries: Sequence[JournalEntry]) -> None:
        data = {"schema": SCHEMA, "entries": [asdict(e) for e in entries]}
        write_config(self.path, (json.dumps(data, indent=2) + "\n").encode(), mode=0o600)

    def record(self, engine: str, change: FileChange, notes: Optional[Dict[str, Any]] = None) -> None:
        """Back up the previous bytes of ``change.path``, then record the write (call before writing)."""
        entries = self.entries()
        path = self.node(change.path)
        created = [self.node(directory) for directory in _missing_dirs(change.path.parent)]
        backup: Optional[str] = None
        mode: Optional[int] = None
        if change.old is not None:
            mode = change.path.stat().st_mode & 0o7777
            stamp = time.strftime("%Y%m%dT%H%M%S")
            target = self.backups / f"{stamp}-{len(entries):04d}-{change.path.name}"
            write_config(target, change.old, mode=0o600)
            backup = self.node(target)
        entry = JournalEntry(
            engine=engine,
            path=path,
            backup=backup,
            sha256=hashlib.sha256(change.new).hexdigest(),
            time=time.time(),
            notes=dict(notes or {}),
            mode=mode,
            created=created,
        )
        self._save([*entries, entry])

    def forget(self, engines: Sequence[str]) -> None:
        """Drop the entries of ``engines`` (after a successful revert)."""
        self._save([e for e in self.entries() if e.engine not in engines])

    def mark_restored(self, node_path: str, engines: Sequence[str]) -> None:
        """Record that a revert of ``engines`` put ``node_path`` back (atomically, before the next file)."""
        entries = self.entries()
        for entry in entries:
            if entry.path == node_path and entry.engine in engines:
                entry.restored = True
        self._save(entries)

    def mark(self) -> JournalMark:
        """Where the journal stands now; :meth:`undo_since` takes everything after it back."""
        return JournalMark(
            len(self.entries()), read_optional(self.path), (self.directory.is_dir(), self.backups.is_dir())
        )

    def undo_since(self, mark: JournalMark) -> List[Path]:
        """Put back every file written after ``mark`` and the journal as it was then; return the files.

        What an install run that fails does with its own writes: the bytes (or absence) of each file
        before the run's first write to it, its backups deleted, the journal's bytes restored. A file
        that cannot be put back keeps its journal entries and backup, so ``revert`` can retry it.

        :raises ConfigFormatError: naming a file that could not be put back (the others were).
        """
        recent = self.entries()[mark.count :]
        failed: Dict[str, ToolError] = {}
        restores = restores_of(self, recent, None)
        for restore in restores:
            try:
                put_back(restore)
            except ToolError as exc:
                failed[restore.node] = exc
        remove_created(restores)
        kept = [entry for entry in recent if entry.path in failed]
        for entry in recent:
            if entry.backup is not None and entry not in kept:
                self.host(entry.backup).unlink(missing_ok=True)
        if kept:
            self._save([*self.entries()[: mark.count], *kept])
        elif mark.raw is None:
            self.path.unlink(missing_ok=True)
        else:
            write_config(self.path, mark.raw, mode=0o600)
        for directory, existed in zip((self.backups, self.directory), (mark.existed[1], mark.existed[0])):
            if not existed:
                with contextlib.suppress(OSError):
                    directory.rmdir()
        if failed:
            raise next(iter(failed.values()))
        return [r.path for r in restores]


def check_can_apply(changes: Sequence[FileChange], journal: Journal) -> None:
    """Refuse before the first write when any changed file, or the journal and backups recording it, cannot be written.

    Permission is what the kernel grants this process: root may replace a 0444 file (as dpkg, sed -i
    and ``vi :w!`` do), and the file keeps its mode; anyone else without write access is refused.

    :raises ConfigFormatError: naming the file and why; nothing has been written.
    """
    changed = [change.path for change in changes if change.changed]
    check_writable([*changed, *(journal.files() if changed else [])])


def apply_changes(
    engine: str, changes: Sequence[FileChange], journal: Journal, notes: Optional[Dict[str, Any]] = None
) -> List[Path]:
    """Write every changed file atomically, each after its backup is journaled; return what was written.

    :raises ConfigFormatError: when a write fails; the files written before it are put back first.
    """
    written: List[Path] = []
    mark = journal.mark()
    try:
        for change in changes:
            if not change.changed:
                continue
            made = (
                _missing_dirs(change.path.parent) if change.owner is not None and change.old is None else []
            )
            journal.record(engine, change, notes)
            write_config(change.path, change.new, mode=change.mode)
            written.append(change.path)
            if (
                change.owner is not None and change.old is None
            ):  # a user's new file, in directories made for it
                for path in (*made, change.path):
                    os.chown(path, *change.owner)
    except BaseException:
        # All or nothing: a write that fails takes back this call's earlier writes and journal entries.
        with contextlib.suppress(ToolError, OSError):
            journal.undo_since(mark)
        raise
    return written


def _missing_dirs(directory: Path) -> List[Path]:
    """``directory`` and its parents that do not exist yet, deepest first."""
    missing: List[Path] = []
    while not os.path.lexists(directory):
        missing.append(directory)
        directory = directory.parent
    return missing


@dataclass(frozen=True)
class Restore:
    """One file a revert puts back, decided before anything changes."""

    engine: str
    node: str  #: the node path the journal records
    path: Path  #: where the file is under the root
    data: Optional[bytes]  #: the bytes before gpu-airgap's first write; None: it did not exist, delete it
    mode: Optional[int]  #: its permission bits then
    created: Tuple[str, ...]  #: directories gpu-airgap created for it, removed again when empty
    edited: Optional[bytes] = None  #: the current bytes, when someone changed them after our last write
    done: bool = False  #: a revert put it back already (it was killed before it finished)

    @property
    def action(self) -> str:
        """``restore`` or ``delete``."""
        return "delete" if self.data is None else "restore"


def restores_of(
    journal: Journal, entries: Sequence[JournalEntry], engines: Optional[Sequence[str]]
) -> List[Restore]:
    """One :class:`Restore` per file in ``entries`` (of ``engines``): first backup, last digest, current edit.

    A file that already holds the bytes it would get back is not edited: a revert that was killed
    after putting it back (before recording so) goes on from there.

    :raises ToolError: when a backup is missing (nothing has changed yet).
    """
    first: Dict[str, JournalEntry] = {}
    last: Dict[str, JournalEntry] = {}
    notes: Dict[str, List[Dict[str, Any]]] = {}
    for entry in entries:
        if engines is None or entry.engine in engines:
            first.setdefault(entry.path, entry)
            last[entry.path] = entry
            notes.setdefault(entry.path, []).append(entry.notes)
    restores: List[Restore] = []
    for node, entry in first.items():
        path = journal.host(node)
        created = tuple(str(journal.host(d)) for d in entry.created)
        done = last[node].restored
        data: Optional[bytes] = None
        if entry.backup is not None:
            backup = journal.host(entry.backup)
            data = read_optional(backup)
            if data is None and not done:
                raise ToolError(f"the backup {backup} of {path} is missing; cannot restore it")
        if done:  # put back by a revert that did not finish: whatever is there now is not ours
            restores.append(Restore(entry.engine, node, path, data, entry.mode, created, done=True))
            continue
        current = read_optional(path)
        edited = (
            current
            if current is not None
            and current != data
            and hashlib.sha256(current).hexdigest() != last[node].sha256
            else None
        )
        owned = lineedits.owned_lines(notes[node])
        if edited is not None and owned is not None:
            # A line edit (LXC config): take out exactly our lines and keep whatever else changed.
            data, edited = (
                lineedits.remove_lines(edited.decode("utf-8", "surrogateescape"), owned).encode(
                    "utf-8", "surrogateescape"
                ),
                None,
            )
        restores.append(Restore(entry.engine, node, path, data, entry.mode, created, edited))
    return restores


def remove_created(restores: Sequence[Restore]) -> None:
    """Directories made for several files (a user's ~/.config tree) go once all of them are gone, deepest first."""
    for directory in sorted(
        {d for r in restores if r.data is None for d in r.created}, key=lambda d: -d.count("/")
    ):
        with contextlib.suppress(OSError):
            Path(directory).rmdir()


def put_back(restore: Restore) -> None:
    """Give ``restore.path`` its bytes (and mode) back, or delete it with the directories made for it."""
    if restore.done:
        return
    if restore.data is not None and read_optional(restore.path) == restore.data:
        return  # the write never happened, or was already undone: nothing to put back
    if restore.data is None:
        try:
            restore.path.unlink(missing_ok=True)
        except NotADirectoryError:
            pass  # a parent is a file: the write we recorded never happened
        except OSError as exc:  # a ToolError, so an undo goes on with the other files
            raise ConfigFormatError(restore.path, f"cannot be deleted: {exc.strerror or exc}") from exc
        for directory in restore.created:  # deepest first; a directory someone filled since stays
            with contextlib.suppress(OSError):
                Path(directory).rmdir()
        return
    # An existing file keeps its owner and mode; a deleted one gets the mode it had.
    write_config(restore.path, restore.data, mode=restore.mode)
