"""One sync's staged changes to a mirror, and the conditional-GET cache they include.

Nothing outside ``DEST/.gpu-airgap/staging/`` changes until :meth:`Transaction.commit`, which
writes every new file into staging first (packages are downloaded there; metadata, cache entries
and ``state.json`` are written there at commit), fsyncs them, and then switches them all in with
one journaled step (:mod:`mirror.disk.switch`). A failure before the journal - a full disk included -
leaves the mirror exactly as it was; a kill after it is completed by the next command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from mirror.disk import store, switch
from mirror.errors import MetadataError
from mirror.index.vouched import DIRECTORY as VOUCHED_DIR
from plumbing.fsutil import atomic_write, safe_join

CACHE_DIR = f"{store.META_DIR}/http-cache"
#: where a repo keeps earlier signed indexes for held releases its current one no longer lists
RETAINED_DIR = ".retained"


@dataclass(frozen=True)
class CachedResponse:
    """A metadata body with the validators the server sent for it."""

    body: bytes
    etag: str | None = None
    last_modified: str | None = None


class Transaction:
    """One sync's staged changes to a mirror; nothing outside ``staging/`` changes until :meth:`commit`."""

    def __init__(self, dest: Path) -> None:
        """Start staging in ``dest`` (the caller holds :func:`mirror.disk.store.locked`).

        A switch a killed sync had committed is completed first, so this sync starts from its result.
        """
        self.dest = dest
        self.meta = dest / store.META_DIR
        self.staging = self.meta / "staging"
        if switch.finish_pending(dest, self.meta):
            shutil.rmtree(self.staging, ignore_errors=True)  # what it staged is in place now
        # A staging/ left by a killed or disk-full run (we hold the lock, so it is ours) is kept: the
        # files it holds are only candidates, re-hashed against this sync's signed digests
        # (staged_match) or resumed by the downloader, and commit()/abort() remove the rest.
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

    def retain_index(self, key: str, index: store.RepoProvenance) -> store.RepoProvenance:
        """Stage a copy of repo ``key``'s recorded ``index`` under ``<key>/.retained/<its digest>/``; its record.

        A sync with ``--allow-older-index`` keeps the index it replaces this way, so the held releases
        the new one no longer lists stay buildable. Each file is checked against the digest the state
        recorded before it is copied.
        """
        top = index.directory or key
        if top.endswith(f"/{VOUCHED_DIR}"):
            return index  # a vouched index has a directory of its own already
        root = next(
            f for f in index.signed_files if f.path in (f"{top}/InRelease", f"{top}/repodata/repomd.xml")
        )
        place = f"{key}/{RETAINED_DIR}/{(root.sha512 or root.sha256 or '')[:16]}"
        files = []
        for stored in index.signed_files:
            problem = store.check_file(self.dest, stored)
            if problem is not None:
                raise MetadataError(stored.path, f"cannot be kept for the held releases: {problem}")
            moved = dataclasses.replace(stored, path=f"{place}/{stored.path[len(top) + 1 :]}")
            if moved.path != stored.path:
                self.stage_metadata(moved.path, stored.local_path(self.dest).read_bytes())
            files.append(moved)
        return dataclasses.replace(index, signed_files=tuple(files))

    def package_target(self, path: str) -> Path:
        """Where to download the package that will live at ``DEST/path``."""
        self._packages.append(path)
        return safe_join(self.staging, path)

    def staging_path(self, path: str) -> Path:
        """Where the file that will live at ``DEST/path`` is staged."""
        return safe_join(self.staging, path)

    def staged_match(self, path: str, *, size: int, sha256: str | None, sha512: str | None) -> bool:
        """True when an interrupted run already staged ``DEST/path`` with exactly this signed size and digest."""
        wanted = store.StoredFile(
            path, size, sha256=sha256.lower() if sha256 else None, sha512=sha512.lower() if sha512 else None
        )
        return store.check_file(self.staging, wanted) is None

    def commit(self, state: store.MirrorState) -> None:
        """Stage metadata, cache entries and ``state.json`` beside the packages, then switch all of them in.

        :raises NoSpaceError: when the disk fills up before the switch; the mirror is unchanged then.
        """
        paths = list(dict.fromkeys(self._packages))
        for path in paths:
            _fsync(safe_join(self.staging, path))  # downloads are flushed, not yet durable
        for path, data in sorted(self._metadata.items()):
            paths += self._stage(path, data)
        for url, response in sorted(self._staged_cache.items()):
            base = f"{CACHE_DIR}/{_cache_key(url)}"
            info = {
                "url": url,
                "etag": response.etag,
                "last_modified": response.last_modified,
                "sha256": hashlib.sha256(response.body).hexdigest(),
            }
            paths += self._stage(f"{base}.body", response.body)
            paths += self._stage(f"{base}.json", json.dumps(info, sort_keys=True).encode())
        paths += self._stage(store.state_path(Path()).as_posix(), state.to_json())  # last: it names the rest
        switch.switch_in(self.dest, self.staging, paths)
        self.abort()

    def _stage(self, path: str, data: bytes) -> list[str]:
        """Write ``data`` for ``DEST/path`` into staging unless the mirror holds exactly it already."""
        target = safe_join(self.dest, path)
        if target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data:
            return []
        atomic_write(safe_join(self.staging, path), data)
        return [path]

    def abort(self) -> None:
        """Forget everything staged, unless a committed switch still needs it (the next run completes it)."""
        if not switch.pending(self.meta):
            shutil.rmtree(self.staging, ignore_errors=True)


def read_cache(dest: Path, url: str) -> CachedResponse | None:
    """The published conditional-GET entry of ``url`` in mirror ``dest``, if intact."""
    base = dest / CACHE_DIR / _cache_key(url)
    try:
        info = json.loads(base.with_suffix(".json").read_text(encoding="utf-8"))
        body = base.with_suffix(".body").read_bytes()
    except (OSError, ValueError):
        return None
    if (
        not isinstance(info, dict)
        or info.get("url") != url
        or hashlib.sha256(body).hexdigest() != info.get("sha256")
    ):
        return None
    return CachedResponse(body, info.get("etag"), info.get("last_modified"))


def _cache_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
