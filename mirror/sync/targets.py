"""What a sync works with: its options and targets, and what planning a target gives.

:mod:`mirror.sync.core` plans and syncs with these records; the CLI renders them. No I/O here
(``make_loader`` only binds a keyring to the repo readers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from mirror.disk import store
from mirror.index.repo import (
    Fetcher,
    MetadataFile,
    clean_relative,
    load_apt_repo,
    load_yum_repo,
    repo_path,
    repo_url,
)
from mirror.model import Package, PackageFormat
from mirror.release.lockfile import LockedPackage, LockedTarget, Lockfile
from mirror.sync import cuda
from mirror.sync.resolve import Resolution
from plumbing.arch import KNOWN_ARCHES, normalize_arch
from plumbing.errors import UsageError
from plumbing.gpg import Keyring

DEFAULT_UPSTREAM = "https://nvidia.github.io/libnvidia-container"


class Snapshot(Protocol):
    """What a verified repository load gives back (``mirror.index.repo.RepoSnapshot``)."""

    @property
    def packages(self) -> Sequence[Package]:
        """Every package the signed index lists."""

    @property
    def fingerprint(self) -> str:
        """Primary-key fingerprint that verified the metadata."""

    @property
    def signed_at(self) -> datetime | None:
        """When the metadata was signed."""

    @property
    def metadata(self) -> Sequence[MetadataFile]:
        """The verified metadata files, exactly as fetched, paths relative to the repo base."""


#: ``loader(fetcher, base_url, fmt) -> Snapshot``: load and verify one repo (keyring bound in).
RepoLoader = Callable[[Fetcher, str, PackageFormat], Snapshot]


def make_loader(keyring: Keyring, *, names: frozenset[str] | None = None) -> RepoLoader:
    """The real loader: ``mirror.index.repo`` verifying against ``keyring``; with ``names``, only those packages are read."""

    def load(fetcher: Fetcher, base_url: str, fmt: PackageFormat) -> Snapshot:
        if fmt is PackageFormat.DEB:
            return load_apt_repo(fetcher, base_url, keyring, names=names)
        return load_yum_repo(fetcher, base_url, keyring, names=names)

    return load


@dataclass(frozen=True)
class RepoTarget:
    """One repository to mirror: a package format and an architecture in that format's spelling."""

    format: PackageFormat
    arch: str

    def key(self, channel: str) -> str:
        """The repo's directory under DEST and upstream: ``stable/deb/amd64``."""
        return repo_path(channel, self.format, self.arch)


def parse_targets(formats: Sequence[str], arches: Sequence[str]) -> list[RepoTarget]:
    """Map ``--format`` and ``--arch`` values (either spelling) to targets, one per format and arch.

    :raises UsageError: for an unknown format or architecture.
    """
    fmts: list[PackageFormat] = []
    for text in formats:
        try:
            fmts.append(PackageFormat(text.strip().lower()))
        except ValueError:
            raise UsageError(f"unknown --format {text!r}; use deb, rpm or deb,rpm") from None
    targets: list[RepoTarget] = []
    for arch in arches:
        arch = arch.strip()
        if arch not in KNOWN_ARCHES:
            known = ", ".join(KNOWN_ARCHES)
            raise UsageError(f"unknown --arch {arch!r}; use one of {known}")
        for fmt in fmts:
            target = RepoTarget(fmt, normalize_arch(arch, fmt))
            if target not in targets:
                targets.append(target)
    return targets


@dataclass(frozen=True)
class SyncOptions:
    """What to mirror: where from, which channel, which targets and which release."""

    upstream: str = DEFAULT_UPSTREAM
    channel: str = "stable"
    targets: tuple[RepoTarget, ...] = (
        RepoTarget(PackageFormat.DEB, "amd64"),
        RepoTarget(PackageFormat.RPM, "x86_64"),
    )
    selector: str = "latest"
    locked: Lockfile | None = None
    #: the keys upstream is verified with and their armored form, recorded in the mirror (:mod:`mirror.sync.origin`);
    #: empty: keep what the mirror recorded and do not check for a switch
    key_fingerprints: tuple[str, ...] = ()
    key: str = ""
    replace_upstream: bool = False  #: switch an existing mirror to this upstream and key
    #: accept an index older than the mirror's, expired, or no longer listing a held release
    #: (:mod:`mirror.sync.freshness`); the replaced index is kept so held releases stay buildable
    allow_older_index: bool = False

    def base_url(self, target: RepoTarget) -> str:
        """Upstream URL of ``target``'s flat repo (a CUDA repository is one repo: its own URL)."""
        if cuda.is_cuda(self.upstream):
            return cuda.base_url(self.upstream)
        return repo_url(self.upstream, self.channel, target.format, target.arch)


@dataclass(frozen=True)
class ReleasePlan:
    """A further toolkit release a target offers (``--version all``), packages in install order."""

    toolkit_version: str
    packages: tuple[Package, ...]
    node_requirements: tuple[str, ...]
    breaks: tuple[str, ...]

    @classmethod
    def of(cls, resolution: Resolution) -> ReleasePlan:
        """The plan of one resolved release."""
        return cls(
            toolkit_version=resolution.toolkit_version,
            packages=tuple(resolution.packages),
            node_requirements=tuple(sorted({str(r) for r in resolution.node_requirements})),
            breaks=tuple(str(b) for b in resolution.breaks),
        )


@dataclass(frozen=True)
class PlannedTarget:
    """One target after its metadata verified and it resolved (or matched the lockfile)."""

    target: RepoTarget
    key: str
    base_url: str
    packages: tuple[Package, ...]  #: install order
    toolkit_version: str
    node_requirements: tuple[str, ...]
    breaks: tuple[str, ...]
    fingerprint: str
    signed_at: str | None
    metadata: dict[str, bytes]  #: verified metadata bytes by path under DEST
    #: further signed indexes (yum filelists/other) fetched like packages so the mirror is servable
    extra_metadata: tuple[store.StoredFile, ...] = ()
    #: packages held besides the release's (``--version all``: the rest of upstream's index)
    also: tuple[Package, ...] = ()
    #: the other releases those packages make up, oldest first (``--version all``)
    other_releases: tuple[ReleasePlan, ...] = ()
    #: the index's own date (:class:`mirror.sync.freshness.IndexDates`), ISO 8601 UTC
    dated: str | None = None
    #: held releases this index no longer lists (accepted with ``--allow-older-index``): the sync
    #: keeps the index it replaces so they stay buildable
    unlisted: tuple[str, ...] = ()

    @property
    def held(self) -> tuple[Package, ...]:
        """Every package this target holds: the release's, then the rest."""
        return self.packages + self.also

    def url(self, pkg: Package) -> str:
        """Upstream URL of ``pkg``."""
        return f"{self.base_url}/{clean_relative(pkg.filename, self.base_url)}"

    def path(self, pkg: Package) -> str:
        """``pkg``'s path under DEST (upstream's relative path)."""
        return f"{self.key}/{clean_relative(pkg.filename, self.base_url)}"

    @property
    def total_bytes(self) -> int:
        """Sum of the sizes of every held package."""
        return sum(p.size for p in self.held)

    def locked(self) -> LockedTarget:
        """This target as a lockfile entry."""
        return LockedTarget(
            format=self.target.format.value,
            arch=self.target.arch,
            toolkit_version=self.toolkit_version,
            key_fingerprint=self.fingerprint,
            packages=tuple(
                LockedPackage(p.name, p.version, p.arch, p.filename, p.size, self.url(p), p.sha256, p.sha512)
                for p in self.held
            ),
        )


@dataclass
class SyncResult:
    """What a sync did, for the CLI to render."""

    dest: str
    channel: str
    targets: list[PlannedTarget]
    downloaded_files: int = 0
    downloaded_bytes: int = 0
    reused_files: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_lockfile(self, upstream: str) -> Lockfile:
        """The lockfile that reproduces this sync."""
        return Lockfile(
            channel=self.channel, upstream=upstream, targets=tuple(t.locked() for t in self.targets)
        )


class Progress(Protocol):
    """Where a sync reports progress (the CLI draws bars or lines; tests pass nothing)."""

    def stage(self, text: str) -> None:
        """A new step began (``verifying stable/deb/amd64``)."""

    def start_downloads(self, files: int, total_bytes: int) -> None:
        """Package downloads start."""

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more arrived (called from worker threads)."""
