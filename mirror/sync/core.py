"""Sync orchestration: per (format, arch) load the signed repo, resolve, download, publish.

:func:`plan` and :func:`sync` take their collaborators as arguments - a ``Fetcher``/downloader,
the keyring, a repo loader and the mirror directory - and contain no HTTP, gpg or file-format
code themselves. The flow of one sync::

    lock DEST -> for each target: load + verify metadata (conditional GET) -> resolve
              -> download missing/changed packages in parallel into staging (verified)
              -> commit: stage metadata, http cache and state.json beside them, then switch
                 everything in under one journal (mirror.disk.switch)

Any error before the switch - a full disk included - leaves the published mirror byte-identical.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from mirror.disk import store
from mirror.errors import LockfileMismatch, UnresolvableDependency
from mirror.index.entries import index_entries
from mirror.index.header import check_agrees, read_header
from mirror.index.repo import Fetcher, clean_relative
from mirror.model import Package, PackageFormat
from mirror.release import lockfile
from mirror.release.lockfile import LockedTarget, Lockfile
from mirror.release.selectors import VersionSelector
from mirror.sync import freshness, origin
from mirror.sync.http import Downloader, DownloadRequest
from mirror.sync.merge import new_state
from mirror.sync.resolve import resolve, resolve_each
from mirror.sync.targets import (
    DEFAULT_UPSTREAM,
    PlannedTarget,
    Progress,
    ReleasePlan,
    RepoLoader,
    RepoTarget,
    Snapshot,
    SyncOptions,
    SyncResult,
    make_loader,
    parse_targets,
)
from mirror.sync.transaction import Transaction
from plumbing.errors import NoSpaceError, ToolError

# The records live in mirror.sync.targets; callers reach them here too (``sync_lib.SyncOptions``).
__all__ = [
    "DEFAULT_UPSTREAM",
    "PlannedTarget",
    "Progress",
    "RepoLoader",
    "RepoTarget",
    "SyncOptions",
    "SyncResult",
    "make_loader",
    "parse_targets",
    "plan",
    "plan_target",
    "sync",
]


def plan_target(
    options: SyncOptions,
    target: RepoTarget,
    *,
    fetcher: Fetcher,
    loader: RepoLoader,
    previous: store.RepoRecord | None = None,
    kept_aside: frozenset[str] = frozenset(),
    now: datetime | None = None,
) -> PlannedTarget:
    """Load and verify ``target``'s repo, check it is not older than ``previous``, then resolve
    ``options.selector`` (or match the lockfile).

    :param previous: what the mirror holds for this repo (None: a new repo, or ``mirror plan``).
    :param kept_aside: its releases only a kept index lists (:func:`mirror.sync.freshness.checked_age`).
    :param now: this host's clock (default: the real one), for Valid-Until and future dates.
    :raises SignatureError | ChecksumMismatch | MetadataError | FetchError: when metadata is bad.
    :raises StaleIndex: when the index is older than the mirror's, expired or dated in the future.
    :raises UnresolvableDependency: when the selection cannot be satisfied.
    :raises LockfileMismatch: when ``options.locked`` names packages upstream no longer has.
    """
    key, base = target.key(options.channel), options.base_url(target)
    snapshot = loader(fetcher, base, target.format)
    metadata = {f"{key}/{clean_relative(m.path, base)}": m.data for m in snapshot.metadata}
    signed_at = snapshot.signed_at.astimezone(timezone.utc).isoformat() if snapshot.signed_at else None
    dates, unlisted = freshness.checked_age(
        snapshot,
        key,
        base,
        previous,
        now=now or datetime.now(timezone.utc),
        allow_older=options.allow_older_index,
        kept_aside=kept_aside,
    )
    common = {
        "target": target,
        "key": key,
        "base_url": base,
        "fingerprint": snapshot.fingerprint,
        "extra_metadata": _extra_metadata(snapshot, key, base, set(metadata)),
        "dated": dates.recorded(),
        "unlisted": unlisted,
    }
    if options.locked is not None:
        wanted = _locked_target(options.locked, target)
        by_key = {p.key: p for p in snapshot.packages}
        chosen = tuple(by_key[p.key] for p in wanted.packages if p.key in by_key)
        # The lockfile names the packages; the resolver still says what the node must provide and
        # what they break, so a bundle built from a locked mirror carries both.
        try:
            # Resolved within the locked set, so upstream's later additions cannot change the release.
            release = ReleasePlan.of(
                resolve(list(chosen), VersionSelector.parse(wanted.toolkit_version), target.format)
            )
            requirements, breaks = release.node_requirements, release.breaks
        except UnresolvableDependency:
            release, requirements, breaks = (
                None,
                (),
                (),
            )  # the differences below say what upstream no longer has
        also: tuple[Package, ...] = ()
        others: tuple[ReleasePlan, ...] = ()
        if release is not None and set(release.packages) < set(chosen):
            # A lock of a full mirror (``--version all``): the release is its closure, the rest is held beside it.
            also = tuple(p for p in chosen if p not in release.packages)
            chosen, others = release.packages, _other_releases(chosen, target.format, release.toolkit_version)
        planned = PlannedTarget(
            **common,  # type: ignore[arg-type]
            packages=chosen,
            toolkit_version=wanted.toolkit_version,
            node_requirements=requirements,
            breaks=breaks,
            signed_at=signed_at,
            metadata=metadata,
            also=also,
            other_releases=others,
        )
        problems = lockfile.differences(wanted, planned.locked())
        if problems:
            raise LockfileMismatch("the lockfile", problems)
        return planned
    selector = VersionSelector.parse(options.selector)
    resolution = resolve(list(snapshot.packages), selector, target.format)
    release = ReleasePlan.of(resolution)
    also, others = (), ()
    if selector.kind == "all":
        rest = set(snapshot.packages) - set(resolution.packages)
        also = tuple(sorted(rest, key=lambda p: (p.name, p.arch, p.filename)))
        others = _other_releases(tuple(resolution.packages) + also, target.format, resolution.toolkit_version)
    for pkg in (*resolution.packages, *also):
        clean_relative(
            pkg.filename, base
        )  # refuse ``../`` names now, before anything is downloaded or reported
    return PlannedTarget(
        **common,  # type: ignore[arg-type]
        packages=release.packages,
        toolkit_version=release.toolkit_version,
        node_requirements=release.node_requirements,
        breaks=release.breaks,
        signed_at=signed_at,
        metadata=metadata,
        also=also,
        other_releases=others,
    )


def _other_releases(
    packages: tuple[Package, ...], fmt: PackageFormat, newest: str
) -> tuple[ReleasePlan, ...]:
    """Every release ``packages`` resolve to, oldest first, except ``newest`` (the target's own, resolved already)."""
    return tuple(ReleasePlan.of(r) for r in resolve_each(packages, fmt, skip=(newest,)))


def _extra_metadata(snapshot: Snapshot, key: str, base: str, have: set[str]) -> tuple[store.StoredFile, ...]:
    """The yum indexes repomd.xml names besides primary, with the checksums it signs."""
    repomd = getattr(snapshot, "repomd", None)
    if repomd is None:
        return ()
    extra: list[store.StoredFile] = []
    for data in repomd.data.values():
        path = f"{key}/{clean_relative(data.href, base)}"
        if path in have or data.size is None or data.checksum_type not in ("sha256", "sha512"):
            continue
        extra.append(
            store.StoredFile(path=path, size=data.size, **{data.checksum_type: data.checksum.lower()})
        )
    return tuple(sorted(extra, key=lambda f: f.path))


def plan(options: SyncOptions, *, fetcher: Fetcher, loader: RepoLoader) -> list[PlannedTarget]:
    """Resolve every target of ``options`` without downloading any package."""
    return [plan_target(options, t, fetcher=fetcher, loader=loader) for t in options.targets]


def sync(
    options: SyncOptions,
    dest: Path,
    *,
    downloader: Downloader,
    loader: RepoLoader,
    progress: Progress | None = None,
) -> SyncResult:
    """Bring mirror ``dest`` up to ``options``; publish only if every target verified and downloaded.

    :raises BusyError: when another sync holds the mirror's lock.
    """
    started = time.monotonic()
    try:
        with store.locked(dest):
            txn = Transaction(dest)
            try:
                result = _sync_locked(
                    options, dest, txn, downloader=downloader, loader=loader, progress=progress
                )
            except KeyboardInterrupt:
                # Ctrl-C, like a kill: keep the verified downloads and .part files in staging/ for the next
                # sync to re-check and resume. Nothing outside staging/ has changed.
                raise
            except BaseException as exc:
                if not NoSpaceError.matches(exc):  # a full disk keeps them too: the next sync resumes
                    txn.abort()
                raise
    except (OSError, NoSpaceError) as exc:
        if not NoSpaceError.matches(exc):
            raise
        if isinstance(exc, NoSpaceError) and exc.outcome != NoSpaceError.UNCHANGED:
            raise  # it says what happened already (the switch was stopped)
        raise NoSpaceError.of(exc, dest, _NO_SPACE_OUTCOME) from exc
    result.seconds = time.monotonic() - started
    return result


_NO_SPACE_OUTCOME = "the mirror is unchanged and what was downloaded is kept for the next sync"


def _sync_locked(
    options: SyncOptions,
    dest: Path,
    txn: Transaction,
    *,
    downloader: Downloader,
    loader: RepoLoader,
    progress: Progress | None,
) -> SyncResult:
    """The body of :func:`sync`, under the lock: plan every target, download, commit."""
    previous = _previous_state(dest)
    replaced = origin.check_switch(
        dest,
        previous,
        options.upstream,
        frozenset(options.key_fingerprints),
        replace=options.replace_upstream,
    )
    fetcher = downloader.fetcher(txn)
    planned: list[PlannedTarget] = []
    for target in options.targets:
        if progress is not None:
            progress.stage(f"verifying {target.key(options.channel)}")
        key = target.key(options.channel)
        held = previous.repo(key) if previous is not None else None
        aside = _kept_aside(dest, held)
        planned.append(
            plan_target(options, target, fetcher=fetcher, loader=loader, previous=held, kept_aside=aside)
        )
    result = SyncResult(dest=str(dest), channel=options.channel, targets=planned)
    stale = [key for key in replaced if key not in {item.key for item in planned}]
    if stale:
        result.warnings.append(
            f"{', '.join(stale)} still hold what the replaced upstream or key gave; sync them again to replace it"
        )
    requests, entering = _downloads(dest, planned, previous, txn, result)
    if progress is not None:
        progress.start_downloads(len(requests), sum(r.size for r in requests))
    result.downloaded_bytes = downloader.download_many(
        requests, progress.advance if progress is not None else None
    )
    result.downloaded_files = len(requests)
    for (
        path,
        url,
        entry,
    ) in entering:  # their digests matched (download or staged_match): now read what they say
        check_agrees(read_header(txn.staging_path(path), entry.format.value, what=url), entry, what=url)
    retained: dict[str, store.RepoProvenance] = {}
    for item in planned:
        old = previous.repo(item.key) if previous is not None and item.unlisted else None
        if old is not None:
            # --allow-older-index took an index without some held releases: keep the one it replaces
            retained[item.key] = txn.retain_index(item.key, old.provenance)
        for path, data in item.metadata.items():
            txn.stage_metadata(path, data)
    txn.commit(new_state(options, planned, previous, retained))
    return result


def _kept_aside(dest: Path, held: store.RepoRecord | None) -> frozenset[str]:
    """The releases of ``held`` that its current index does not list but a kept one does."""
    if held is None or not held.retained:
        return frozenset()
    try:
        current = index_entries(dest, held, held.provenance)
    except ToolError:
        return frozenset()  # a damaged index: check strictly; the sync replaces it
    return frozenset(version for version, _ in freshness.missing_releases(held, current))


def _previous_state(dest: Path) -> store.MirrorState | None:
    return store.MirrorState.load(dest) if store.state_path(dest).exists() else None


def _downloads(
    dest: Path,
    planned: Sequence[PlannedTarget],
    previous: store.MirrorState | None,
    txn: Transaction,
    result: SyncResult,
) -> tuple[list[DownloadRequest], list[tuple[str, str, Package]]]:
    """The files that are not already in the mirror with the signed size and digest (re-hashed), and
    the packages that enter the mirror with this sync (downloaded now, or staged by a stopped run).

    A file whose record matches but whose bytes no longer do (damaged in place) is downloaded
    again, so a re-sync repairs what ``mirror verify`` reports.
    """
    wanted: dict[str, _Wanted] = {}
    for item in planned:
        old = previous.repo(item.key) if previous is not None else None
        held = {p.path: p for p in old.packages} if old is not None else {}
        for extra in item.extra_metadata:  # yum filelists/other: no state record, always re-hashed
            url = f"{item.base_url}/{extra.path[len(item.key) + 1 :]}"
            wanted.setdefault(extra.path, _Wanted(url, extra, recorded=True, entry=None))
        for pkg in item.held:
            path = item.path(pkg)
            if path not in wanted:
                signed = store.StoredFile(path, pkg.size, sha256=pkg.sha256, sha512=pkg.sha512)
                recorded = store.same_record(
                    held.get(path), size=pkg.size, sha256=pkg.sha256, sha512=pkg.sha512
                )
                wanted[path] = _Wanted(item.url(pkg), signed, recorded=recorded, entry=pkg)
    in_place = store.intact(dest, [w.signed for w in wanted.values() if w.recorded])
    requests: list[DownloadRequest] = []
    entering: list[tuple[str, str, Package]] = []  # path, url, signed index entry
    for path, want in wanted.items():
        signed, is_package = want.signed, want.entry is not None
        if path in in_place:
            result.reused_files += is_package
            continue
        if want.entry is not None:
            entering.append((path, want.url, want.entry))
        target = txn.package_target(path)
        if txn.staged_match(path, size=signed.size, sha256=signed.sha256, sha512=signed.sha512):
            result.reused_files += is_package  # verified by a run that was stopped before its switch
            continue
        requests.append(
            DownloadRequest(want.url, target, signed.size, sha256=signed.sha256, sha512=signed.sha512)
        )
    return requests, entering


@dataclass(frozen=True)
class _Wanted:
    """One file a sync needs: where from, what signed metadata says it is, and whether the mirror records it."""

    url: str
    signed: store.StoredFile
    recorded: bool  #: the published state (or, for yum indexes, repomd) names exactly these digests
    entry: Package | None  #: the signed index entry of a package (None: a yum index such as filelists)


def _locked_target(lock: Lockfile, target: RepoTarget) -> LockedTarget:
    for locked in lock.targets:
        if locked.format == target.format.value and locked.arch == target.arch:
            return locked
    raise LockfileMismatch("the lockfile", [f"it locks nothing for {target.format.value}/{target.arch}"])
