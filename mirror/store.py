"""The mirror on disk: layout, lock, state file, and transactional publishing.

Layout of ``DEST`` (upstream's relative paths are kept, so a mirror can be served as-is)::

    DEST/
      .gpu-airgap.lock                    flock'ed by sync/prune (exclusive) and publish (shared); never deleted
      .gpu-airgap/
        state.json                        what the mirror holds (MirrorState); written LAST
        http-cache/<key>.json, <key>.body conditional-GET validators and bodies of metadata
        staging/                          a sync in progress; removed when it ends (kept after a crash)
      stable/deb/amd64/InRelease          verified metadata, exactly the bytes that verified
      stable/deb/amd64/Packages.xz
      stable/deb/amd64/<name>_<ver>_<arch>.deb
      stable/rpm/x86_64/repodata/repomd.xml, repomd.xml.asc, <sha>-primary.xml.gz
      stable/rpm/x86_64/<name>-<ver>.<arch>.rpm

A sync writes everything new below ``staging/`` and only then publishes: package files first
(new names, so the old state never points at them), then metadata, then the HTTP cache, then
``state.json`` with :func:`~plumbing.fsutil.atomic_write`. A sync that fails before publishing
removes ``staging/`` and leaves every other byte of ``DEST`` as it was. A sync that is interrupted
(Ctrl-C) keeps ``staging/``, and one that is killed (SIGKILL, power cut) cannot clean up: either
way the next sync reuses the package files it had verified and resumes its ``.part`` files, then
removes whatever else ``staging/`` holds once it ends.

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
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from mirror.errors import MirrorStateError
from plumbing.errors import BusyError, ToolError
from plumbing.fsutil import atomic_write, safe_join

CHUNK: Final = 1024 * 1024

STATE_VERSION: Final = 1
LOCK_NAME: Final = ".gpu-airgap.lock"
META_DIR: Final = ".gpu-airgap"


@dataclass(frozen=True)
class CachedResponse:
    """A metadata body with the validators the server sent for it."""

    body: bytes
    etag: str | None = None
    last_modified: str | None = None


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

    @classmethod
    def load(cls, dest: Path) -> MirrorState:
        """Read ``DEST/.gpu-airgap/state.json``.

        :raises MirrorStateError: when ``dest`` holds no mirror or the file is damaged.
        """
        path = state_path(dest)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise MirrorStateError(dest, "it has no state file (run `gpu-airgap mirror sync` first)") from None
        except (OSError, ValueError) as exc:
            raise MirrorStateError(dest, f"cannot read {path.name}: {exc}") from exc
        try:
            return cls.from_dict(raw)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # AttributeError: a list where an object belongs
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
                provenance=RepoProvenance(
                    fingerprint=r["provenance"]["fingerprint"],
                    signed_at=r["provenance"]["signed_at"],
                    signed_files=tuple(StoredFile(**f) for f in r["provenance"]["signed_files"]),
                ),
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
        return cls(upstream=raw["upstream"], channel=raw["channel"], repos=repos, selector=raw.get("selector", ""))

    def to_json(self) -> bytes:
        """The ``state.json`` bytes (stable key order, so unchanged state renders identically)."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

    def repo(self, key: str) -> RepoRecord | None:
        """The record for repo ``key`` (``stable/deb/amd64``), if the mirror holds it."""
        return next((r for r in self.repos if r.key == key), None)


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
        raise ToolError(f"cannot use {dest} as a mirror: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                if shared:
                    raise BusyError(f"a sync or prune is changing {dest}; wait for it to finish") from exc
                raise BusyError(f"another sync is running on {dest} (or a publish is reading it); wait for it to finish") from exc
            raise
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


class Transaction:
    """One sync's staged changes to a mirror; nothing outside ``staging/`` changes until :meth:`commit`."""

    def __init__(self, dest: Path) -> None:
        """Start staging in ``dest`` (the caller holds :func:`locked`)."""
        self.dest = dest
        self.meta = dest / META_DIR
        self.staging = self.meta / "staging"
        # A staging/ left by a killed run (we hold the lock, so it is ours) is kept: the files it
        # holds are only candidates, re-hashed against this sync's signed digests (staged_match) or
        # resumed by the downloader, and commit()/abort() remove it with everything unclaimed.
        self.staging.mkdir(parents=True, exist_ok=True)
        self._staged_cache: dict[str, CachedResponse] = {}
        self._metadata: dict[str, bytes] = {}
        self._packages: list[str] = []

    # -- ResponseCache ---------------------------------------------------------------------------

    def lookup(self, url: str) -> CachedResponse | None:
        """Cached metadata for ``url``: what this sync fetched, else what the published mirror holds."""
        if url in self._staged_cache:
            return self._staged_cache[url]
        return read_cache(self.dest, url)

    def remember(self, url: str, response: CachedResponse) -> None:
        """Stage ``response`` for the cache; it is published with the rest."""
        if response.etag or response.last_modified:
            self._staged_cache[url] = response

    # -- staging ---------------------------------------------------------------------------------

    def stage_metadata(self, path: str, data: bytes) -> None:
        """Publish ``data`` at ``DEST/path`` on commit (verified metadata bytes)."""
        safe_join(self.dest, path)
        self._metadata[path] = data

    def package_target(self, path: str) -> Path:
        """Where to download the package that will live at ``DEST/path``."""
        self._packages.append(path)
        return safe_join(self.staging, path)

    def staged_match(self, path: str, *, size: int, sha256: str | None, sha512: str | None) -> bool:
        """True when an interrupted run already staged ``DEST/path`` with exactly this signed size and digest."""
        wanted = StoredFile(path, size, sha256=sha256.lower() if sha256 else None, sha512=sha512.lower() if sha512 else None)
        return check_file(self.staging, wanted) is None

    def commit(self, state: MirrorState) -> None:
        """Publish packages, then metadata, then the HTTP cache, then ``state.json``; end staging."""
        for path in self._packages:
            staged, final = safe_join(self.staging, path), safe_join(self.dest, path)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, final)
        for path, data in sorted(self._metadata.items()):
            target = safe_join(self.dest, path)
            if not target.exists() or target.read_bytes() != data:
                atomic_write(target, data)
        for url, response in self._staged_cache.items():
            base = self.meta / "http-cache" / _cache_key(url)
            info = {"url": url, "etag": response.etag, "last_modified": response.last_modified}
            info["sha256"] = hashlib.sha256(response.body).hexdigest()
            body_path, info_path = base.with_suffix(".body"), base.with_suffix(".json")
            if not body_path.exists() or body_path.read_bytes() != response.body:
                atomic_write(body_path, response.body)
            rendered = json.dumps(info, sort_keys=True).encode()
            if not info_path.exists() or info_path.read_bytes() != rendered:
                atomic_write(info_path, rendered)
        write_state(self.dest, state)
        self.abort()

    def abort(self) -> None:
        """Forget everything staged."""
        shutil.rmtree(self.staging, ignore_errors=True)


def write_state(dest: Path, state: MirrorState) -> None:
    """Atomically replace the state file of ``dest`` (untouched when nothing changed)."""
    rendered = state.to_json()
    target = state_path(dest)
    if not target.exists() or target.read_bytes() != rendered:
        atomic_write(target, rendered)


def read_cache(dest: Path, url: str) -> CachedResponse | None:
    """The published conditional-GET entry of ``url`` in mirror ``dest``, if intact."""
    base = dest / META_DIR / "http-cache" / _cache_key(url)
    try:
        info = json.loads(base.with_suffix(".json").read_text(encoding="utf-8"))
        body = base.with_suffix(".body").read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("url") != url or hashlib.sha256(body).hexdigest() != info.get("sha256"):
        return None
    return CachedResponse(body, info.get("etag"), info.get("last_modified"))


def is_current(dest: Path, stored: StoredFile | None, *, size: int, sha256: str | None, sha512: str | None) -> bool:
    """True when ``stored`` (from the published state) is the file signed metadata now names.

    The state only lists files that were verified before they got their final name, so a
    matching record plus the right size on disk is enough; ``verify`` re-hashes everything.
    """
    if stored is None or stored.size != size:
        return False
    if sha512 and stored.sha512 != sha512:
        return False
    if sha256 and stored.sha256 != sha256:
        return False
    try:
        return stored.local_path(dest).stat().st_size == size
    except OSError:
        return False


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


def _cache_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:32]

