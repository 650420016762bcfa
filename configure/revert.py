"""Revert: every file an engine's configuration changed gets its bytes from before gpu-airgap's first change.

A revert checks everything first (:func:`plan_revert`: every engine has entries, every backup is
there, no file was edited since) and only then changes anything (:func:`apply_revert`); with
``force`` an edited file is kept beside the original as ``FILE.gpu-airgap-old``. A file
gpu-airgap only appended lines to (:mod:`configure.lineedits`, LXC configs) is not refused when
edited since: exactly its lines are taken out and the edit stays.

A revert records each file it put back in the journal (atomically, before the next one), so a
revert killed at any point finishes when run again: what it put back is not taken for an edit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from configure.changes import write_config
from configure.journal import Journal, Restore, put_back, remove_created, restores_of
from plumbing.errors import ProblemsFound, ToolError

#: an admin's edit that ``revert --force`` / ``uninstall --force`` replaces is kept as FILE + this
KEPT_SUFFIX = ".gpu-airgap-old"


@dataclass
class RevertPlan:
    """Everything a revert of some engines will do; :func:`apply_revert` carries it out."""

    engines: List[str]
    restores: List[Restore]

    @property
    def problems(self) -> List[str]:
        """Every file edited since gpu-airgap wrote it (a revert without ``force`` refuses)."""
        return [
            f"{r.path} was edited after gpu-airgap wrote it (use --force to restore anyway)"
            for r in self.restores
            if r.edited is not None
        ]


@dataclass
class RevertOutcome:
    """What :func:`apply_revert` did."""

    restored: List[Path] = field(default_factory=list)
    deleted: List[Path] = field(default_factory=list)
    kept: Dict[str, str] = field(default_factory=dict)  #: edited file -> where its edited bytes are kept


def plan_revert(journal: Journal, engines: Sequence[str]) -> RevertPlan:
    """Decide the revert of ``engines``: which file gets which bytes back; change nothing.

    :raises ToolError: naming the first engine with nothing to revert, or a missing backup.
    """
    entries = journal.entries()
    recorded = {entry.engine for entry in entries}
    for engine in engines:
        if engine not in recorded:
            raise ToolError(
                f"nothing to revert: gpu-airgap has not changed any {engine} configuration under {journal.root}"
            )
    return RevertPlan(list(engines), restores_of(journal, entries, engines))


def apply_revert(journal: Journal, plan: RevertPlan, *, force: bool = False) -> RevertOutcome:
    """Carry out ``plan``; an edited file is first kept as ``FILE.gpu-airgap-old`` (``force`` only).

    :param force: restore even files someone edited after our last write.
    :raises ProblemsFound: listing every file edited since, unless ``force`` (nothing is changed then).
    """
    if plan.problems and not force:
        raise ProblemsFound("refusing to revert", plan.problems)
    outcome = RevertOutcome()
    for restore in plan.restores:
        if not restore.done:
            if restore.edited is not None:
                outcome.kept[str(restore.path)] = str(_keep_aside(restore.path, restore.edited))
            put_back(restore)
            journal.mark_restored(restore.node, plan.engines)
        (outcome.deleted if restore.data is None else outcome.restored).append(restore.path)
    remove_created(plan.restores)
    journal.forget(plan.engines)
    return outcome


def revert(engine: str, journal: Journal, *, force: bool = False) -> List[Path]:
    """Restore every file ``engine`` changed to its bytes before gpu-airgap's first change.

    :param force: restore even files someone edited after our last write (kept as ``FILE.gpu-airgap-old``).
    :raises ProblemsFound: listing every file edited since, unless ``force``.
    :raises ToolError: when there is nothing to revert.
    """
    plan = plan_revert(journal, [engine])
    apply_revert(journal, plan, force=force)
    return [restore.path for restore in plan.restores]


def kept_name(path: Path, data: Optional[bytes] = None) -> Path:
    """Where an admin's edit of ``path`` is kept: ``FILE.gpu-airgap-old`` (``.1``, ``.2``, … when taken).

    A copy already holding exactly ``data`` is the place (a revert killed after keeping the edit
    keeps it once when run again). No engine reads that name: containerd imports, CRI-O drop-ins
    and CDI specs need their own suffixes.
    """
    target = path.with_name(path.name + KEPT_SUFFIX)
    n = 0
    while os.path.lexists(target):
        if data is not None and not target.is_symlink() and target.is_file() and target.read_bytes() == data:
            return target
        n += 1
        target = path.with_name(f"{path.name}{KEPT_SUFFIX}.{n}")
    return target


def _keep_aside(path: Path, data: bytes) -> Path:
    """Write ``data`` (an admin's edit) to :func:`kept_name`, with the file's mode; never overwrite a copy."""
    target = kept_name(path, data)
    if not target.exists():
        write_config(target, data, mode=path.stat().st_mode & 0o7777 if path.exists() else 0o600)
    return target
