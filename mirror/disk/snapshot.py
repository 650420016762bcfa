"""Snapshots of a mirror: ``gpu-airgap mirror snapshot create|list|diff|delete``.

A snapshot freezes what the mirror holds at one moment, without copying a byte::

    DEST/.gpu-airgap/snapshots/NAME/
      .gpu-airgap.lock                  made here, so readers never write into a snapshot
      .gpu-airgap/state.json            the mirror's state.json at that moment, byte for byte
      .gpu-airgap/snapshot.json         name and creation time
      stable/deb/amd64/InRelease, …     hard links of every file that state lists: packages and
                                        the signed indexes (current and kept ones)

so a snapshot *is* a mirror: ``bundle build --snapshot`` and ``mirror publish --snapshot`` read it
with the unchanged readers, and a bundle built from it verifies against the same signed indexes.

Immutable because the mirror never edits a file in place: a sync moves new files over old names
(``os.replace``: a new inode, the snapshot keeps the old one) and prune unlinks the mirror's name
(the snapshot's own link keeps the bytes). ``create`` builds in ``snapshots/.NAME.new-*`` and
renames it into place last, so a kill leaves no half snapshot listed; ``delete`` renames it aside
first for the same reason. Both hold ``snapshots/.lock``, under which stale temp dirs are removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final

from mirror.disk import store, worklock
from plumbing.errors import BusyError, NoSpaceError, ToolError, UsageError
from plumbing.fsutil import atomic_write, fsync_dir, safe_join

SNAPSHOTS: Final = "snapshots"
INFO_NAME: Final = "snapshot.json"
#: ``diff`` takes this name for the live mirror, so no snapshot may have it
CURRENT: Final = "current"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class SnapshotError(UsageError):
    """A snapshot name that is invalid, taken or unknown, or a delete that would drop a published snapshot."""


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot as ``mirror snapshot list`` shows it."""

    name: str
    created: str  #: ISO 8601 UTC
    releases: dict[str, list[str]]  #: repo key (``stable/deb/amd64``) -> toolkit versions, oldest first
    files: int
    shared_bytes: int  #: bytes whose inodes the mirror or another snapshot also links
    unique_bytes: int  #: bytes only this snapshot holds (what delete frees)


@dataclass(frozen=True)
class RepoDiff:
    """What changed in one repo from snapshot A to snapshot B."""

    key: str
    releases_added: list[str]
    releases_removed: list[str]
    packages_added: list[str]
    packages_removed: list[str]


def check_name(name: str) -> str:
    """``name`` when it is a plain, contained snapshot name.

    :raises SnapshotError: naming what is allowed.
    """
    if not _NAME.fullmatch(name) or name == CURRENT:
        raise SnapshotError(
            f"snapshot name {name!r} is not allowed: use letters, digits, '.', '_' and '-' (at most 64, "
            f"starting with a letter or digit; {CURRENT!r} means the live mirror)"
        )
    return name


def root(dest: Path) -> Path:
    """The directory that holds the snapshots of mirror ``dest``."""
    return dest / store.META_DIR / SNAPSHOTS


def path(dest: Path, name: str) -> Path:
    """The directory of snapshot ``name`` of mirror ``dest``.

    :raises SnapshotError: for a bad name or a snapshot that does not exist.
    """
    where = safe_join(root(dest), check_name(name))
    if not (where / store.META_DIR / INFO_NAME).is_file():
        store.MirrorState.load(dest)  # a directory that is no mirror says so first
        held = ", ".join(s for s in names(dest)) or "none"
        raise SnapshotError(f"mirror {dest} has no snapshot {name!r} (it has: {held})")
    return where


def names(dest: Path) -> list[str]:
    """The complete snapshots of ``dest``, sorted by name."""
    top = root(dest)
    if not top.is_dir():
        return []
    return sorted(
        p.name
        for p in top.iterdir()
        if _NAME.fullmatch(p.name) and (p / store.META_DIR / INFO_NAME).is_file()
    )


def _changing(dest: Path) -> contextlib.AbstractContextManager[Path]:
    """Hold ``snapshots/.lock`` and remove temp dirs a killed create or delete left; yield the snapshots dir."""

    def cannot(exc: OSError) -> ToolError:
        if NoSpaceError.matches(exc):
            return NoSpaceError(root(dest))
        return ToolError(f"cannot change the snapshots of {dest}: {exc.strerror or exc}")

    return worklock.exclusive(
        root(dest),
        ".lock",
        ".*",
        busy=f"another snapshot create or delete is running on {dest}; wait for it",
        cannot=cannot,
    )


def create(dest: Path, name: str, *, now: datetime | None = None) -> SnapshotInfo:
    """Freeze what mirror ``dest`` holds as snapshot ``name``: hard links of every listed file.

    :raises SnapshotError: for a bad or taken name.
    :raises MirrorStateError, BusyError: as :func:`mirror.disk.store.reading` does.
    """
    check_name(name)
    created = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with store.reading(dest) as state, _changing(dest) as top:
        if (top / name).exists():
            raise SnapshotError(
                f"mirror {dest} already has a snapshot {name!r}; delete it or pick another name"
            )
        new = Path(tempfile.mkdtemp(prefix=f".{name}.new-", dir=top))
        try:
            new.chmod(0o755)
            for stored in _files(state):
                _link(dest, new, stored)
            (new / store.LOCK_NAME).touch(0o644)
            meta = new / store.META_DIR
            atomic_write(meta / "state.json", store.state_path(dest).read_bytes(), mode=0o644)
            info = {"name": name, "created": created}
            atomic_write(meta / INFO_NAME, (json.dumps(info, indent=2) + "\n").encode(), mode=0o644)
            new.rename(top / name)  # the last step: the snapshot is listed complete or not at all
            fsync_dir(top)
        except (OSError, NoSpaceError) as exc:
            if NoSpaceError.matches(exc):
                raise NoSpaceError(top, "no snapshot was made") from exc
            raise ToolError(
                f"cannot create snapshot {name!r}: {getattr(exc, 'strerror', None) or exc}"
            ) from exc
        finally:
            shutil.rmtree(new, ignore_errors=True)
    return info_of(dest, name)


def _files(state: store.MirrorState) -> list[store.StoredFile]:
    """Every file ``state`` lists once: packages, then the signed files of each index."""
    seen: dict[str, store.StoredFile] = {}
    for repo in state.repos:
        for stored in (*repo.packages, *(f for index in repo.indexes for f in index.signed_files)):
            seen.setdefault(stored.path, stored)
    return list(seen.values())


def _link(dest: Path, snap: Path, stored: store.StoredFile) -> None:
    source, target = stored.local_path(dest), safe_join(snap, stored.path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise ToolError(
            f"{stored.path} is missing from the mirror; no snapshot was made: run `gpu-airgap mirror verify` "
            "and sync again"
        ) from None
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EMLINK, errno.EACCES):
            raise ToolError(
                f"cannot hard-link {stored.path} into the snapshot ({exc.strerror}); a snapshot copies nothing, "
                "so run it as the mirror's owner"
            ) from exc
        raise
    if target.stat().st_size != stored.size:
        raise ToolError(
            f"{stored.path} in the mirror is not the size its state records; no snapshot was made: "
            "run `gpu-airgap mirror verify`"
        )


def info_of(dest: Path, name: str) -> SnapshotInfo:
    """What ``list`` shows for snapshot ``name``."""
    where = path(dest, name)
    meta = json.loads((where / store.META_DIR / INFO_NAME).read_text(encoding="utf-8"))
    state = store.MirrorState.load(where)
    files, shared, unique, seen = 0, 0, 0, set()
    for stored in _files(state):
        st = stored.local_path(where).stat()
        files += 1
        if st.st_ino in seen:
            continue
        seen.add(st.st_ino)
        if st.st_nlink > 1:
            shared += st.st_size
        else:
            unique += st.st_size
    releases = {r.key: [rel.toolkit_version for rel in r.releases] for r in state.repos}
    return SnapshotInfo(name, str(meta.get("created", "")), releases, files, shared, unique)


def listing(dest: Path) -> list[SnapshotInfo]:
    """Every snapshot of mirror ``dest``, oldest first (then by name).

    :raises MirrorStateError: when ``dest`` holds no mirror.
    """
    store.MirrorState.load(dest)
    return sorted((info_of(dest, n) for n in names(dest)), key=lambda s: (s.created, s.name))


def state_of(dest: Path, name: str) -> store.MirrorState:
    """The state snapshot ``name`` froze, or the live mirror's for ``current``."""
    if name == CURRENT:
        return store.read_state(dest)
    return store.MirrorState.load(path(dest, name))


def diff(dest: Path, a: str, b: str) -> list[RepoDiff]:
    """Releases and packages added and removed from ``a`` to ``b`` (either may be ``current``), per repo."""
    old, new = state_of(dest, a), state_of(dest, b)
    changes = []
    for key in sorted({r.key for r in old.repos} | {r.key for r in new.repos}):
        before, after = old.repo(key), new.repo(key)
        rel_a = [r.toolkit_version for r in before.releases] if before else []
        rel_b = [r.toolkit_version for r in after.releases] if after else []
        pkg_a = {Path(p.path).name for p in before.packages} if before else set()
        pkg_b = {Path(p.path).name for p in after.packages} if after else set()
        change = RepoDiff(
            key,
            [v for v in rel_b if v not in rel_a],
            [v for v in rel_a if v not in rel_b],
            sorted(pkg_b - pkg_a),
            sorted(pkg_a - pkg_b),
        )
        if (
            change.releases_added
            or change.releases_removed
            or change.packages_added
            or change.packages_removed
        ):
            changes.append(change)
    return changes


def delete(dest: Path, name: str, *, published_at: list[str], force: bool = False) -> None:
    """Remove snapshot ``name``; refused while ``published_at`` (the trees serving it) is not empty, unless ``force``.

    The published trees hold their own links, so they keep working either way; the refusal keeps a
    promotion's rollback target from disappearing unnoticed.
    """
    where = path(dest, name)
    if published_at and not force:
        raise SnapshotError(
            f"snapshot {name!r} is published at {', '.join(published_at)}; publish another snapshot there "
            "first, or pass --force (the published tree keeps working)"
        )
    with _changing(dest) as top, _unread(where, name):
        aside = Path(tempfile.mkdtemp(prefix=f".{name}.old-", dir=top))
        where.rename(aside / name)  # unlisted in one step; the bytes go after
        fsync_dir(top)
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _unread(where: Path, name: str) -> Iterator[None]:
    """Hold snapshot ``where`` exclusively: no publish or bundle build is reading it meanwhile."""
    try:
        with store.locked(where):
            yield
    except BusyError as exc:  # only taking the lock raises it
        raise BusyError(
            f"a publish or bundle build is reading snapshot {name!r}; wait for it to finish"
        ) from exc
