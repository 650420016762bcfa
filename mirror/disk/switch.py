"""Switch a set of staged files into a mirror all at once: a journaled series of renames.

A sync stages every new file (packages, verified metadata, HTTP cache entries and, last,
``state.json``) below ``DEST/.gpu-airgap/staging/`` at its final relative path, fsynced. Then:

1. :func:`switch_in` creates the directories the files will land in and writes the journal
   ``DEST/.gpu-airgap/switch.json`` (atomically, fsynced) naming every file: **the commit point**.
   A failure before it (a full disk, a kill) leaves the mirror as it was.
2. It renames each staged file over its final name (``state.json`` last), fsyncs the directories
   and removes the journal.

A run killed (or refused by the disk) between 1 and 2 leaves the journal; :func:`finish_pending`
completes it: staged files still there are renamed, the ones already moved are skipped. Renames
need no free space on tmpfs, ext4 or xfs in practice (the directories exist already), so the
switch that the journal protects can only be stopped by a kill or a power cut. The mirror lock
(``store.locked``) keeps readers out while a switch runs; a reader that finds a journal left by a
killed run completes it first (``store.reading``), so no reader ever sees new metadata beside an old
``state.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from plumbing.errors import NoSpaceError, ToolError
from plumbing.fsutil import atomic_write, fsync_dir, safe_join

JOURNAL: Final = "switch.json"
_VERSION: Final = 1


class SwitchError(ToolError):
    """The journal of an interrupted switch cannot be completed."""


def journal_path(meta: Path) -> Path:
    """The journal of the mirror whose metadata directory is ``meta`` (``DEST/.gpu-airgap``)."""
    return meta / JOURNAL


def pending(meta: Path) -> bool:
    """True when a switch was committed but not completed (a journal is left)."""
    return journal_path(meta).exists()


def switch_in(dest: Path, staging: Path, paths: Sequence[str]) -> None:
    """Move ``staging/P`` to ``dest/P`` for every ``P`` in ``paths``, in order, as one journaled step.

    :param dest: the mirror.
    :param staging: where the files were staged (inside ``dest``, on the same filesystem).
    :param paths: relative POSIX paths; every one must be staged and fsynced by the caller.
    :raises NoSpaceError: when the directories or the journal cannot be written (nothing switched).
    """
    if not paths:
        return
    moves = [(_relative(safe_join(staging, p), dest), p) for p in paths]
    for source, target in moves:
        if not safe_join(dest, source).is_file():
            raise SwitchError(f"cannot switch {target} into {dest}: its staged copy is missing")
        safe_join(dest, target).parent.mkdir(parents=True, exist_ok=True)
    meta = staging.parent
    atomic_write(journal_path(meta), json.dumps({"version": _VERSION, "moves": moves}, indent=1).encode())
    _replay(dest, meta)


def finish_pending(dest: Path, meta: Path) -> bool:
    """Complete the switch a killed run committed; True when there was one. The caller holds the lock.

    :raises SwitchError: when the journal is damaged or names a file that is neither staged nor in place.
    """
    if not pending(meta):
        return False
    _replay(dest, meta)
    return True


def _replay(dest: Path, meta: Path) -> None:
    journal = journal_path(meta)
    try:
        raw = json.loads(journal.read_text(encoding="utf-8"))
        moves = [(str(source), str(target)) for source, target in raw["moves"]]
        if raw.get("version") != _VERSION:
            raise ValueError(f"unknown version {raw.get('version')!r}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SwitchError(
            f"{journal} of an interrupted sync is unreadable ({exc}); remove it and sync again"
        ) from exc
    touched: set[Path] = set()
    for source_rel, target_rel in moves:
        source, target = safe_join(dest, source_rel), safe_join(dest, target_rel)
        if source.exists():
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, target)
            except OSError as exc:
                if NoSpaceError.matches(exc):
                    raise NoSpaceError(
                        target, "the new files are staged and the next sync finishes switching them in"
                    ) from exc
                raise SwitchError(f"cannot switch {target_rel} into {dest}: {exc.strerror or exc}") from exc
            touched.add(target.parent)
        elif not target.exists():
            raise SwitchError(
                f"{journal} names {target_rel}, which is neither staged nor in place; remove the journal and sync again"
            )
    for directory in sorted(touched):
        fsync_dir(directory)
    journal.unlink()
    fsync_dir(meta)


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(os.path.abspath(root)).as_posix()
