"""``mirror list``: the toolkit releases of each channel/format/arch, upstream and in the mirror.

Like ``apt list -a`` or ``dnf --showduplicates``: every release is one row, marked with where it
is (upstream's signed index, the mirror), whether a lockfile pins it, and whether it is a release
candidate. Upstream's releases are the versions of ``nvidia-container-toolkit`` its verified index
lists; the mirror's are the releases its ``state.json`` records. :func:`combine` is the pure core;
:func:`list_releases` asks upstream through the collaborators it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mirror.disk.store import MirrorState
from mirror.errors import FetchError
from mirror.index.repo import Fetcher, repo_path, repo_url
from mirror.model import EXPERIMENTAL, PackageFormat
from mirror.release.lockfile import Lockfile
from mirror.release.selectors import VersionSelector
from mirror.release.versions import sort_key
from mirror.sync import cuda
from mirror.sync.resolve import DEFAULT_ROOT
from mirror.sync.targets import RepoLoader, RepoTarget
from plumbing.errors import ToolError


@dataclass(frozen=True)
class ListedRelease:
    """One toolkit release of one repo and where it is."""

    version: str  #: the full package version, ``1.17.8-1``
    upstream: bool | None  #: in upstream's signed index (None: upstream was not asked or did not answer)
    mirror: bool  #: recorded in the mirror's state
    locked: bool  #: the release the lockfile pins for this repo
    release_candidate: bool

    @property
    def marks(self) -> list[str]:
        """``["upstream", "mirror", "locked", "release candidate"]``, those that apply."""
        flags = [("upstream", bool(self.upstream)), ("mirror", self.mirror), ("locked", self.locked)]
        return [name for name, on in flags if on] + (["release candidate"] if self.release_candidate else [])


@dataclass(frozen=True)
class RepoListing:
    """The releases of one (channel, format, arch) repository, newest first."""

    key: str  #: ``stable/deb/amd64``
    channel: str
    format: str
    arch: str
    releases: tuple[ListedRelease, ...]
    upstream_error: str | None = None  #: why upstream's releases are not listed


def is_release_candidate(channel: str, version: str) -> bool:
    """True for the experimental channel's releases and any ``~rc`` version."""
    return channel == EXPERIMENTAL or "~rc" in version or "-rc" in version.split("-", 1)[0]


def combine(
    channel: str,
    target: RepoTarget,
    *,
    upstream: Sequence[str] | None,
    mirror: Sequence[str],
    locked: str | None,
    selector: VersionSelector | None,
    upstream_error: str | None = None,
) -> RepoListing:
    """One repo's listing from upstream's versions (None: not known), the mirror's and the locked one."""
    fmt = target.format
    versions = sorted({*(upstream or ()), *mirror}, key=sort_key(fmt), reverse=True)
    if selector is not None and selector.kind == "latest":
        versions = versions[:1]
    elif selector is not None:
        versions = [v for v in versions if selector.matches(v, fmt)]
    rows = tuple(
        ListedRelease(
            version=v,
            upstream=None if upstream is None else v in upstream,
            mirror=v in mirror,
            locked=v == locked,
            release_candidate=is_release_candidate(channel, v),
        )
        for v in versions
    )
    return RepoListing(
        key=target.key(channel),
        channel=channel,
        format=fmt.value,
        arch=target.arch,
        releases=rows,
        upstream_error=upstream_error,
    )


def list_releases(
    channels: Sequence[str],
    targets: Sequence[RepoTarget],
    *,
    upstream: str,
    state: MirrorState | None,
    lock: Lockfile | None,
    selector: VersionSelector | None,
    fetcher: Fetcher | None,
    loader: RepoLoader | None,
) -> tuple[list[RepoListing], FetchError | None]:
    """The listing of every channel and target, and the connection error that stopped asking upstream (None: none).

    Upstream is asked only with a ``fetcher`` and ``loader``. A connection problem stops asking it
    (every further repo would wait for the same retries); an answer such as HTTP 404 or a bad
    signature is reported for that repo alone.
    """
    unreachable: FetchError | None = None
    listings: list[RepoListing] = []
    for channel in channels:
        for target in targets:
            offered: list[str] | None = None
            error = str(unreachable) if unreachable is not None else None
            if fetcher is not None and loader is not None and unreachable is None:
                try:
                    offered = _upstream_versions(fetcher, loader, upstream, channel, target)
                except FetchError as exc:
                    error = str(exc)
                    unreachable = exc if exc.status is None else None
                except ToolError as exc:
                    error = str(exc)
            key = repo_path(channel, target.format, target.arch)
            held = state.repo(key) if state is not None else None
            listings.append(
                combine(
                    channel,
                    target,
                    upstream=offered,
                    mirror=[r.toolkit_version for r in held.releases] if held is not None else [],
                    locked=_locked_version(lock, channel, target),
                    selector=selector,
                    upstream_error=error,
                )
            )
    return listings, unreachable


def _upstream_versions(
    fetcher: Fetcher, loader: RepoLoader, upstream: str, channel: str, target: RepoTarget
) -> list[str]:
    url = (
        cuda.base_url(upstream)
        if cuda.is_cuda(upstream)
        else repo_url(upstream, channel, target.format, target.arch)
    )
    snapshot = loader(fetcher, url, target.format)
    return sorted(
        {p.version for p in snapshot.packages if p.name == DEFAULT_ROOT}, key=sort_key(target.format)
    )


def _locked_version(lock: Lockfile | None, channel: str, target: RepoTarget) -> str | None:
    if lock is None or lock.channel != channel:
        return None
    for locked in lock.targets:
        if (locked.format, locked.arch) == (target.format.value, target.arch):
            return locked.toolkit_version
    return None


def mirror_targets(state: MirrorState | None) -> list[RepoTarget]:
    """The (format, arch) targets the mirror holds in any channel, in its order."""
    found: list[RepoTarget] = []
    for repo in state.repos if state is not None else ():
        target = RepoTarget(PackageFormat(repo.format), repo.arch)
        if target not in found:
            found.append(target)
    return found
