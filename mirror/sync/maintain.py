"""Looking after an existing mirror: ``status``, ``verify`` and ``prune``.

All three read :class:`~mirror.disk.store.MirrorState`; ``prune`` is the only one that changes the
mirror, and it holds the mirror lock, writes the smaller state first and deletes files after, so
the state never names a file that is gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from mirror.disk import store, switch
from mirror.index.entries import index_entries, signed_entries
from mirror.index.repo import Fetcher
from mirror.index.vouched import VOUCHED
from mirror.model import PackageFormat
from mirror.release.selectors import VersionSelector
from mirror.sync import freshness
from mirror.sync.core import RepoLoader
from mirror.sync.resolve import resolve
from mirror.sync.transaction import CachedResponse, read_cache
from plumbing.errors import ToolError, UsageError
from plumbing.fsutil import safe_join


@dataclass
class MirrorVerifyReport:
    """What ``verify`` checked and every problem it found."""

    files: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)


def verify(dest: Path) -> MirrorVerifyReport:
    """Re-hash every package and metadata file against the digests recorded from signed metadata.

    :raises MirrorStateError: when ``dest`` holds no mirror.
    :raises BusyError: when a sync or prune is changing it.
    """
    report = MirrorVerifyReport()
    with store.reading(dest) as state:
        for repo in state.repos:
            signed = [f for index in repo.indexes for f in index.signed_files]
            for stored in (*signed, *repo.packages):
                report.files += 1
                report.bytes += stored.size
                problem = store.check_file(dest, stored)
                if problem is not None:
                    report.problems.append(problem)
            if not report.problems:  # the indexes are intact: do they list what the state holds?
                report.problems += _disagreements(dest, repo)
    return report


def _disagreements(dest: Path, repo: store.RepoRecord) -> list[str]:
    """Each release the state lists whose packages the mirror's signed indexes do not list (with those digests)."""
    try:
        entries = signed_entries(dest, repo)
    except ToolError as exc:
        return [str(exc)]
    return [
        f"{repo.key}: the state lists release {version}, but the mirror's signed index does not list {path} "
        "with the digests the state records (the index and the state disagree: sync again, with "
        "--allow-older-index if upstream withdrew it)"
        for version, path in freshness.missing_releases(repo, entries)
    ]


@dataclass
class PruneReport:
    """What ``prune`` removed."""

    removed_releases: list[str] = field(default_factory=list)  #: ``stable/deb/amd64 1.17.8-1``
    removed_files: list[str] = field(default_factory=list)
    freed_bytes: int = 0


def prune(dest: Path, keep: int, *, dry_run: bool = False) -> PruneReport:
    """Keep the newest ``keep`` toolkit releases of every repo, and the packages they need.

    :raises UsageError: when ``keep`` is below 1.
    :raises BusyError: when a sync holds the mirror.
    """
    if keep < 1:
        raise UsageError("--keep must be at least 1 (use rm -r to delete a whole mirror)")
    report = PruneReport()
    with store.locked(dest):
        switch.finish_pending(
            dest, dest / store.META_DIR
        )  # prune the state a killed sync committed, not the one before
        state = store.MirrorState.load(dest)
        repos: list[store.RepoRecord] = []
        doomed: list[store.StoredFile] = []
        dropped: list[store.RepoProvenance] = []  #: kept indexes no kept release needs any more
        for repo in state.repos:
            kept = _kept(dest, repo, keep)
            report.removed_releases += [
                f"{repo.key} {r.toolkit_version}" for r in repo.releases if r not in kept
            ]
            needed = {path for r in kept for path in r.packages}
            doomed += [p for p in repo.packages if p.path not in needed]
            packages = tuple(p for p in repo.packages if p.path in needed)
            retained = _needed_indexes(dest, repo, needed)
            dropped += [index for index in repo.retained if index not in retained]
            doomed += [f for index in repo.retained if index not in retained for f in index.signed_files]
            repos.append(dataclasses.replace(repo, packages=packages, releases=kept, retained=retained))
        report.removed_files = [p.path for p in doomed]
        report.freed_bytes = sum(p.size for p in doomed)
        if dry_run or (not doomed and not report.removed_releases):
            return report
        store.write_state(dest, dataclasses.replace(state, repos=tuple(repos)))
        for pkg in doomed:
            with contextlib.suppress(FileNotFoundError):
                pkg.local_path(dest).unlink()
        for index in dropped:  # their directories, once empty (repodata/ before its parent)
            top = safe_join(dest, index.directory)
            for directory in [*sorted((d for d in top.rglob("*") if d.is_dir()), reverse=True), top]:
                with contextlib.suppress(OSError):
                    directory.rmdir()
    return report


def _needed_indexes(dest: Path, repo: store.RepoRecord, needed: set[str]) -> tuple[store.RepoProvenance, ...]:
    """The kept indexes (``--allow-older-index``) that still list a ``needed`` package the current one does not."""
    if not repo.retained:
        return ()
    try:
        wanted = needed - set(index_entries(dest, repo, repo.provenance))
        kept: list[store.RepoProvenance] = []
        for index in repo.retained:
            listed = wanted & set(index_entries(dest, repo, index))
            if listed:
                kept.append(index)
                wanted -= listed
    except ToolError:
        return repo.retained  # unreadable: mirror verify says why; prune removes none of them
    return tuple(kept)


def _kept(dest: Path, repo: store.RepoRecord, keep: int) -> tuple[store.Release, ...]:
    """The newest ``keep`` releases, and the newest one a bundle can be built from if none of them is.

    A release is buildable when the mirror's signed indexes list its packages with the recorded
    digests; a mirror whose index went back (synced before the freshness checks) may hold newer
    releases that are not: prune never leaves it without one it can build.
    """
    kept = repo.releases[-keep:]
    try:
        entries = signed_entries(dest, repo)
    except ToolError:
        return kept  # unreadable indexes: mirror verify says why; prune keeps the plain rule
    unbuildable = {version for version, _ in freshness.missing_releases(repo, entries)}
    if all(r.toolkit_version in unbuildable for r in kept):
        buildable = [r for r in repo.releases if r.toolkit_version not in unbuildable]
        if buildable:
            return tuple(r for r in repo.releases if r in kept or r is buildable[-1])
    return kept


@dataclass(frozen=True)
class RepoStatus:
    """One repo of the mirror next to its upstream."""

    key: str
    releases: tuple[str, ...]  #: toolkit versions held, oldest first
    packages: int
    bytes: int
    synced_at: str
    signed_by: str
    upstream_latest: str | None = None  #: newest toolkit on the channel upstream (None: not checked)
    #: the vouched indexes of packages taken on the operator's word (``import-archive --trust-archive``)
    vouched: tuple[str, ...] = ()
    error: str | None = None  #: why upstream could not be checked

    @property
    def newer_upstream(self) -> bool:
        """True when upstream has a newer toolkit than the newest one held."""
        return bool(
            self.upstream_latest
            and self.releases
            and self.upstream_latest != self.releases[-1]
            and self.upstream_latest not in self.releases
        )


def status(dest: Path, *, fetcher: Fetcher | None, loader: RepoLoader | None) -> list[RepoStatus]:
    """Describe what mirror ``dest`` holds and, given a fetcher, what is newer upstream.

    Upstream problems (network, signatures) are reported per repo, not raised: the local part of
    the answer is still useful.
    """
    state = store.read_state(dest)
    result: list[RepoStatus] = []
    for repo in state.repos:
        latest: str | None = None
        error: str | None = None
        if fetcher is not None and loader is not None:
            try:
                fmt = PackageFormat(repo.format)
                snapshot = loader(fetcher, repo.base_url, fmt)
                latest = resolve(
                    list(snapshot.packages), VersionSelector.parse("latest"), fmt
                ).toolkit_version
            except Exception as exc:
                error = str(exc)
        result.append(
            RepoStatus(
                key=repo.key,
                releases=tuple(r.toolkit_version for r in repo.releases),
                packages=len(repo.packages),
                bytes=sum(p.size for p in repo.packages),
                synced_at=repo.synced_at,
                signed_by=repo.provenance.fingerprint,
                upstream_latest=latest,
                error=error,
                vouched=tuple(
                    f.path for i in repo.indexes if i.fingerprint == VOUCHED for f in i.signed_files
                ),
            )
        )
    return result


class ReadOnlyCache:
    """The published HTTP cache of a mirror, for commands that must not change it (``status``)."""

    def __init__(self, dest: Path) -> None:
        """Read the cache of mirror ``dest``."""
        self.dest = dest

    def lookup(self, url: str) -> CachedResponse | None:
        """The stored response for ``url``."""
        return read_cache(self.dest, url)

    def remember(self, url: str, response: CachedResponse) -> None:
        """Do nothing: status never writes to the mirror."""
