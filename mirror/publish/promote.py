"""Promotion and its undo: which trees serve a snapshot, and ``mirror publish --rollback``.

Promoting is ``mirror publish --snapshot NAME --output OUT``: the swap keeps the tree it replaced
as ``.OUT.previous`` (:mod:`mirror.publish.swap`), and ``--rollback`` exchanges the two atomically,
so the previous snapshot is served again with the very bytes and signatures it had; a second
``--rollback`` undoes the first. Each tree's marker names the snapshot it came from.

A snapshot publish also records ``OUT`` in the mirror (``.gpu-airgap/publishes/<hash>.json``), so
``mirror snapshot delete`` can find the trees that serve a snapshot, or can be rolled back to it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from mirror.disk import snapshot as snapshots
from mirror.disk import store
from mirror.publish.swap import MARKER, previous, rollback
from plumbing.fsutil import atomic_write

RECORDS: Final = "publishes"


def record(mirror: Path, out: Path) -> None:
    """Remember that ``out`` was published from a snapshot of ``mirror``."""
    where = os.path.abspath(out)
    name = hashlib.sha256(where.encode()).hexdigest()[:16]
    data = (json.dumps({"output": where}) + "\n").encode()
    atomic_write(mirror / store.META_DIR / RECORDS / f"{name}.json", data, mode=0o644)


def marker(tree: Path) -> dict[str, Any] | None:
    """The publish marker of ``tree``, or None when it has none (or an unreadable one)."""
    try:
        data = json.loads((tree / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def published_at(mirror: Path, name: str) -> list[str]:
    """The trees (served, or kept for ``--rollback``) that hold snapshot ``name`` of ``mirror``."""
    where = os.path.abspath(snapshots.root(mirror) / name)
    found = []
    for entry in sorted((mirror / store.META_DIR / RECORDS).glob("*.json")):
        try:
            out = Path(json.loads(entry.read_text(encoding="utf-8"))["output"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for tree, how in ((out, "{}"), (previous(out), "{} (its --rollback target)")):
            mark = marker(tree)
            if mark and mark.get("snapshot") == name and mark.get("mirror") == where:
                found.append(how.format(out))
    return found


def describe(mark: dict[str, Any] | None) -> str:
    """``snapshot NAME`` or ``the live mirror`` for a tree's marker."""
    if mark is None:
        return "an unmarked tree"
    return (
        f"snapshot {mark['snapshot']}"
        if mark.get("snapshot")
        else f"the live mirror {mark.get('mirror', '')}"
    )


def undo(
    out: Path, prepare: Callable[[Path], object] | None = None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Roll ``out`` back (:func:`mirror.publish.swap.rollback`); the markers of the tree replaced and now served."""
    rollback(out, prepare)
    return marker(previous(out)), marker(out)
