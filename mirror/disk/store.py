"""The mirror on disk: layout, lock, state file, and how readers get a consistent view.

Layout of ``DEST`` (upstream's relative paths are kept, so a mirror can be served as-is)::

    DEST/
      .gpu-airgap.lock                    flock'ed by sync/prune (exclusive) and readers (shared); never deleted
      .gpu-airgap/
        state.json                        what the mirror holds (MirrorState); switched in LAST
        http-cache/<key>.json, <key>.body conditional-GET validators and bodies of metadata
        staging/                          a sync in progress; removed when it ends (kept after a crash or a full disk)
        switch.json                       only while a sync switches its staged files in (mirror.disk.switch)
      stable/deb/amd64/InRelease          verified metadata, exactly the bytes that verified
      stable/deb/amd64/Packages.xz
      stable/deb/amd64/<name>_<ver>_<arch>.deb
      stable/rpm/x86_64/repodata/repomd.xml, repomd.xml.asc, <sha>-primary.xml.gz
      stable/rpm/x86_64/<name>-<ver>.<arch>.rpm

A sync (:mod:`mirror.sync.transaction`) writes every new file below ``staging/`` - packages,
metadata, cache entries and ``state.json`` - and then switches them in with one journaled step
(:mod:`mirror.disk.switch`). A sync that fails before that (a bad signature, a full disk, Ctrl-C)
leaves every byte outside ``staging/`` as it was; one that is killed during the switch leaves a
journal that the next command completes. Either way the next sync reuses the package files it
had verified and resumes its ``.part`` files, then removes whatever else ``staging/`` holds.

Readers (``mirror verify``, ``status``, ``bundle build``, ``publish``) go through :func:`reading`:
it holds the lock shared, so no switch runs under them, and completes a switch a killed sync left.

``state.json`` is the read API for the bundle builder: :meth:`MirrorState.load` gives each repo's
provenance (who signed which metadata, and when), the packages with their local paths and
hashes, and the toolkit releases with the install-ordered packages each one needs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from mirror.disk import switch
from mirror.errors import MirrorStateError
from plumbing.errors import BusyError, NoSpaceError, ToolError
from plumbing.fsutil import atomic_write, safe_join

CHUNK: Final = 1024 * 1024

STATE_VERSION: Final = 1
LOCK_NAME: Final = ".gpu-airgap.lock"
META_DIR: Final = ".gpu-airgap"


@dataclass(frozen=True)
class StoredFile:
    """A file the mirror holds: its path under ``DEST`` and the digests signed metadata gave it."""

    path: str  #: relative to DEST, POSIX (``stable/deb/amd64/x.deb``)
    size: int
    sha256: str | None = None
    sha512: str | None = None

    def local_path(self, dest: Path) -> Path:
        """Absolute path of this file inside the mirror ``dest``."""
        return safe_join(dest, self.path)


@dataclass(frozen=True)
class StoredPackage(StoredFile):
    """A package file with its identity and where it came from."""

    name: str = ""
    version: str = ""
    arch: str = ""
    url: str = ""  #: the upstream URL it was downloaded from


@dataclass(frozen=True)
class RepoProvenance:
    """Who signed a repo's metadata, when, and the hashes of the signed files, as ``state.json`` keeps them.

    A bundle carries the same facts per target as :class:`installer.manifest.Provenance` (plus the repo's URL).
    """

    fingerprint: str
    signed_at: str | None  #: ISO 8601 UTC
    signed_files: tuple[StoredFile, ...]  #: InRelease / repomd.xml(.asc) and what they vouch for
    #: the index's own date (apt ``Date``, repomd revision or newest timestamp), ISO 8601 UTC; a
    #: later sync refuses an index dated before it (:mod:`mirror.sync.freshness`)
    dated: str | None = None

    @property
    def directory(self) -> str:
        """The directory under DEST that holds this index (its paths are relative to it)."""
        for f in self.signed_files:
            for root in ("/InRelease", "/repodata/repomd.xml"):
                if f.path.endswith(root):
                    return f.path[: -len(root)]
            if "/.vouched/" in f.path:  # an index the operator vouched for (mirror.index.vouched)
                return f.path.rsplit("/", 1)[0]
        return ""


@dataclass(frozen=True)
class Release:
    """One toolkit release the mirror holds for a repo, with the packages it needs in install order."""

    toolkit_version: str
    packages: tuple[str, ...]  #: paths of StoredPackage entries, install order
    node_requirements: tuple[str, ...] = ()
    breaks: tuple[str, ...] = ()


@dataclass(frozen=True)
class RepoRecord:
    """Everything the mirror holds for one (channel, format, arch) repository."""

    key: str  #: the repo's directory under DEST, e.g. ``stable/deb/amd64``
    format: str
    arch: str
    channel: str
    base_url: str
    provenance: RepoProvenance
    packages: tuple[StoredPackage, ...]
    releases: tuple[Release, ...]  #: oldest first
    synced_at: str = ""
    #: earlier signed indexes kept under ``<key>/.retained/`` because they list held releases the
    #: current one no longer lists (a sync with ``--allow-older-index``), newest first
    retained: tuple[RepoProvenance, ...] = ()

    @property
    def indexes(self) -> tuple[RepoProvenance, ...]:
        """The current signed index, then the retained ones."""
        return (self.provenance, *self.retained)

    def package(self, path: str) -> StoredPackage:
        """The stored package at ``path``."""
        for pkg in self.packages:
            if pkg.path == path:
                return pkg
        raise MirrorStateError(self.key, f"release refers to {path}, which the state does not list")


@dataclass(frozen=True)
class MirrorState:
    """The content of ``state.json``: the mirror's repos and what was asked for last."""

    upstream: str
    channel: str
    repos: tuple[RepoRecord, ...] = ()
    selector: str = ""
    version: int = STATE_VERSION
    #: the primary keys upstream's metadata is verified with (empty in a mirror synced before they were recorded)
    key_fingerprints: tuple[str, ...] = ()
    #: those keys, armored, when the operator named them (``--keyring``); empty for NVIDIA's built-in key
    key: str = ""

    @classmethod
    def load(cls, dest: Path) -> MirrorState:
        """Read ``DEST/.gpu-airgap/state.json``.

        :raises MirrorStateError: when ``dest`` holds no mirror or the file is damaged.
        """
        path = state_path(dest)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise MirrorStateError(
                dest, "it has no state file (run `gpu-airgap mirror sync` first)"
            ) from None
        except (OSError, ValueError) as exc:
            raise MirrorStateError(dest, f"cannot read {path.name}: {exc}") from exc
        try:
            return cls.from_dict(raw)
        except (
            AttributeError,
            KeyError,
            TypeError,
            ValueError,
        ) as exc:  # AttributeError: a list where an object belongs
            raise MirrorStateError(dest, f"{path.name} is malformed ({exc})") from exc

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MirrorState:
        """Build from the JSON form."""
        if raw.get("version") != STATE_VERSION:
            raise ValueError(f"unknown state version {raw.get('version')!r}")
        repos = tuple(
            RepoRecord(
                key=r["key"],
                format=r["format"],
                arch=r["arch"],
                channel=r["channel"],
                base_url=r["base_url"],
                provenance=_provenance(r["provenance"]),
                retained=tuple(_provenance(p) for p in r.get("retained", ())),
                packages=tuple(StoredPackage(**p) for p in r["packages"]),
                releases=tuple(
                    Release(
                        toolkit_version=rel["toolkit_version"],
                        packages=tuple(rel["packages"]),
                        node_requirements=tuple(rel.get("node_requirements", ())),
                        breaks=tuple(rel.get("breaks", ())),
                    )
                    for rel in r["releases"]
                ),
                synced_at=r.get("synced_at", ""),
            )
            for r in raw["repos"]
        )
        return cls(
            upstream=raw["upstream"],
            channel=raw["channel"],
            repos=repos,
            selector=raw.get("selector", ""),
            key_fingerprints=tuple(str(f) for f in raw.get("key_fingerprints", ())),
            key=str(raw.get("key", "")),
        )

    def to_json(self) -> bytes:
        """The ``state.json`` bytes (stable key order, so unchanged state renders identically)."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

    def repo(self, key: str) -> RepoRecord | None:
        """The record for repo ``key`` (``stable/deb/amd64``), if the mirror holds it."""
        return next((r for r in self.repos if r.key == key), None)


def _provenance(raw: dict[str, Any]) -> RepoProvenance:
    return RepoProvenance(
        fingerprint=raw["fingerprint"],
        signed_at=raw["signed_at"],
        signed_files=tuple(StoredFile(**f) for f in raw["signed_files"]),
        dated=raw.get("dated"),
    )


def state_path(dest: Path) -> Path:
    """Where the state file of mirror ``dest`` lives."""
    return dest / META_DIR / "state.json"


@contextlib.contextmanager
def locked(dest: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock of mirror ``dest`` for the ``with`` block: exclusive (sync, prune; ``dest`` is
    created when missing) or ``shared`` (readers such as ``publish``: several may read at once, and
    no sync or prune can change files under them).

    :raises BusyError: when another process holds it in a conflicting mode.
    """
    try:
        if not shared:
            dest.mkdir(parents=True, exist_ok=True)
        # A reader only needs to read the lock file, so a read-only mirror can still be published.
        fd = os.open(dest / LOCK_NAME, (os.O_RDONLY if shared else os.O_RDWR) | os.O_CREAT, 0o644)
    except OSError as exc:
        if NoSpaceError.matches(exc):
            raise NoSpaceError(dest / LOCK_NAME) from exc
        raise ToolError(f"cannot use {dest} as a mirror: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                if shared:
                    raise BusyError(f"a sync or prune is changing {dest}; wait for it to finish") from exc
                raise BusyError(
                    f"another sync is running on {dest} (or a publish is reading it); wait for it to finish"
                ) from exc
            raise
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def reading(dest: Path) -> Iterator[MirrorState]:
    """Hold mirror ``dest`` for reading and yield its state: no sync or prune changes it meanwhile.

    A switch that a killed sync committed but did not complete is completed first (under the
    exclusive lock, for a moment), so a reader never sees new metadata beside an old ``state.json``.

    :raises MirrorStateError: when ``dest`` holds no mirror, or an interrupted switch cannot be completed here.
    :raises BusyError: when a sync or prune is changing the mirror.
    """
    meta = dest / META_DIR
    if switch.pending(meta):
        try:
            with locked(dest):
                switch.finish_pending(dest, meta)
        except (BusyError, NoSpaceError):
            raise
        except ToolError as exc:
            raise MirrorStateError(
                dest,
                f"a sync was interrupted while switching in its files and this command cannot finish it ({exc}); "
                "run `gpu-airgap mirror sync` on it",
            ) from exc
    MirrorState.load(dest)  # a clear error for a directory that holds no mirror, before any lock file is made
    with locked(dest, shared=True):
        if switch.pending(meta):  # a sync was killed mid-switch since the check above
            raise MirrorStateError(
                dest, "a sync was interrupted while switching in its files; run the command again"
            )
        yield MirrorState.load(dest)


def read_state(dest: Path) -> MirrorState:
    """The state of mirror ``dest`` as :func:`reading` gives it, for a reader that needs only the state."""
    with reading(dest) as state:
        return state


def write_state(dest: Path, state: MirrorState) -> None:
    """Atomically replace the state file of ``dest`` (untouched when nothing changed)."""
    rendered = state.to_json()
    target = state_path(dest)
    if not target.exists() or target.read_bytes() != rendered:
        atomic_write(target, rendered)


def same_record(stored: StoredFile | None, *, size: int, sha256: str | None, sha512: str | None) -> bool:
    """True when ``stored`` (from the published state) records the size and digests signed metadata now names."""
    if stored is None or stored.size != size:
        return False
    if sha512 and stored.sha512 != sha512:
        return False
    return not (sha256 and stored.sha256 != sha256)


def intact(dest: Path, files: Sequence[StoredFile], *, workers: int = 4) -> set[str]:
    """The paths of ``files`` whose bytes in mirror ``dest`` still match their recorded digest.

    Every file is re-hashed (a size check would keep a file damaged in place); the files are
    hashed side by side, since hashlib releases the GIL while it works on large buffers.
    """
    if not files:
        return set()
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(files)))) as pool:
        problems = list(pool.map(lambda f: check_file(dest, f), files))
    return {f.path for f, problem in zip(files, problems) if problem is None}


def file_digest(path: Path, algo: str) -> str:
    """Hex digest of ``path`` read in large chunks."""
    hasher = hashlib.new(algo)
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            hasher.update(block)
    return hasher.hexdigest()


def check_file(dest: Path, stored: StoredFile) -> str | None:
    """Re-hash one stored file; return a problem sentence or None."""
    try:
        path = stored.local_path(dest)
        size = path.stat().st_size
    except OSError:
        return f"{stored.path} is missing"
    if size != stored.size:
        return f"{stored.path} has {size} bytes, expected {stored.size}"
    algo, expected = ("sha512", stored.sha512) if stored.sha512 else ("sha256", stored.sha256)
    if expected is None:
        return f"{stored.path} has no recorded checksum"
    if file_digest(path, algo) != expected:
        return f"{stored.path} does not match its recorded {algo}"
    return None
