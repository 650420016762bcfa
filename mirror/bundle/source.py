"""What the bundle builder takes from a mirror: per target, the packages of one release and their provenance.

This is the seam between ``mirror sync``'s on-disk state and :mod:`mirror.bundle.build`. The
builder only sees :class:`TargetSelection`; :func:`select_from_mirror` reads the mirror's state
file (``DEST/.gpu-airgap/state.json``, written by ``mirror sync``: repos keyed
``<channel>/<format>/<arch>`` with provenance, stored packages and releases in install order)
and picks one release per requested target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from installer.manifest import Provenance, SignedFile
from installer.target import Requirement
from mirror.disk.store import MirrorState, Release, RepoProvenance, RepoRecord, StoredPackage
from mirror.errors import SelectorError
from mirror.index.entries import index_entries, signed_entries
from mirror.model import EXPERIMENTAL, STABLE, Package, PackageFormat, SourcePackage
from mirror.release.lockfile import LockedPackage, LockedTarget, Lockfile
from mirror.release.selectors import VersionSelector
from plumbing.arch import normalize_arch
from plumbing.errors import ChecksumMismatch, ExitCode, ToolError, UsageError


class SourceError(ToolError):
    """The mirror cannot supply what the bundle asks for."""


class MissingRelease(SourceError):
    """The mirror holds no release that ``--version`` (or the lockfile) selects: unresolvable, as in ``mirror sync``."""

    exit_code = ExitCode.UNRESOLVABLE


@dataclass(frozen=True)
class TargetSelection:
    """One target's release: packages in install order, node requirements and provenance."""

    format: str
    arch: str
    toolkit_version: str
    packages: tuple[SourcePackage, ...]
    node_requirements: tuple[str, ...]
    provenance: Provenance  #: who signed the repo's upstream metadata, as the mirror verified it
    #: the resolution's ``<package> Breaks|Conflicts <relation>`` lines (mirror state ``breaks``)
    breaks: tuple[str, ...] = ()

    def breaks_of(self, name: str) -> tuple[str, ...] | None:
        """The relations package ``name`` breaks or conflicts with, in a form the node can evaluate.

        None when the mirror recorded no Breaks for the release at all (a ``sync --locked`` does
        not resolve): the manifest then omits the field and the node uses its known list.

        >>> TargetSelection("deb", "amd64", "1", (), (), Provenance("", "", None),
        ...     ("t Breaks r (<= 3.5.0-1)", "t Conflicts (a if b)")).breaks_of("t")
        ('r (<= 3.5.0-1)',)
        """
        if not self.breaks:
            return None
        out: list[str] = []
        for line in self.breaks:
            package, _kind, relation = [*line.split(" ", 2), "", ""][:3]
            if package != name or not relation or relation in out:
                continue
            try:
                Requirement.parse(relation)
            except ToolError:
                continue  # an rpm rich dependency: the node's rpm enforces it, preflight cannot
            out.append(relation)
        return tuple(out)


@dataclass(frozen=True)
class MirrorSelection:
    """Everything the builder needs from a mirror."""

    upstream: str
    channel: str
    targets: tuple[TargetSelection, ...]


def parse_target(spec: str) -> tuple[str, str]:
    """``deb/amd64`` -> ``("deb", "amd64")``, mapping the other arch spelling (``deb/x86_64``).

    :raises UsageError: for anything but ``deb/ARCH`` or ``rpm/ARCH``.
    """
    fmt, _, arch = spec.partition("/")
    if fmt not in ("deb", "rpm") or not arch or "/" in arch:
        raise UsageError(f"--target {spec!r} must look like deb/amd64 or rpm/x86_64")
    # Either spelling of an arch is accepted on the command line; the repo uses its format's own.
    return fmt, normalize_arch(arch, fmt)


def upstream_version(version: str) -> str:
    """``1.17.8-1`` -> ``1.17.8`` (strip the Debian revision / rpm release)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def select_from_mirror(
    mirror: Path,
    *,
    version: str,
    targets: list[tuple[str, str]],
    channel: str | None,
    locked: Lockfile | None = None,
) -> MirrorSelection:
    """Pick ``version`` (any ``--version`` selector of ``mirror sync`` but ``all``) for each target from the mirror at ``mirror``.

    With ``locked``, take exactly the lockfile's targets and packages (name, version, arch and
    checksums must match what the mirror holds) instead of ``version``/``targets``.

    :raises MirrorStateError: when the mirror has no (readable) state.
    :raises SourceError: when the mirror lacks a target, the version or a locked package.
    """
    state = MirrorState.load(mirror)
    if locked is not None:
        channel = locked.channel
        targets = [(t.format, t.arch) for t in locked.targets]
    chosen = []
    for fmt, arch in targets:
        if locked is not None:
            repo = _repo(state, f"{locked.channel}/{fmt}/{arch}")
            release = _locked_release(
                repo, next(t for t in locked.targets if (t.format, t.arch) == (fmt, arch))
            )
        else:
            repo, release = _release_of(state, channel, fmt, arch, version)
        entries = signed_entries(mirror, repo)
        packages = tuple(_source_package(mirror, repo.package(path), entries) for path in release.packages)
        prov = _listing_index(mirror, repo, release)
        chosen.append(
            TargetSelection(
                format=fmt,
                arch=arch,
                toolkit_version=release.toolkit_version,
                packages=packages,
                node_requirements=release.node_requirements,
                provenance=Provenance(
                    upstream_url=repo.base_url,
                    fingerprint=prov.fingerprint,
                    signed_at=prov.signed_at,
                    signed_files=tuple(
                        SignedFile(f.path, f.size, f.sha256, f.sha512) for f in prov.signed_files
                    ),
                ),
                breaks=release.breaks,
            )
        )
    versions = {upstream_version(t.toolkit_version) for t in chosen}
    if len(versions) > 1:
        raise SourceError(
            f"the targets resolve to different toolkit versions ({', '.join(sorted(versions))}); pass --version"
        )
    return MirrorSelection(upstream=state.upstream, channel=channel or STABLE, targets=tuple(chosen))


def _repo(state: MirrorState, key: str) -> RepoRecord:
    repo = state.repo(key)
    if repo is None:
        held = ", ".join(r.key for r in state.repos) or "nothing"
        raise SourceError(f"the mirror has no {key} repository (it holds {held}); sync it first")
    return repo


def _release_of(
    state: MirrorState, channel: str | None, fmt: str, arch: str, version: str
) -> tuple[RepoRecord, Release]:
    """The repo and release ``version`` selects on ``channel``; without ``--channel``, on stable, always.

    A mirror holds both channels side by side, and whichever was synced last says nothing about
    what a build should ship: release candidates are built only when ``--channel experimental``
    asks for them. When stable cannot serve the build but experimental could, the build is
    refused with that hint rather than falling back silently.
    """
    try:
        repo = _repo(state, f"{channel or STABLE}/{fmt}/{arch}")
        return repo, _pick_release(repo, version)
    except SourceError:
        if channel is not None:
            raise
        rc = state.repo(f"{EXPERIMENTAL}/{fmt}/{arch}")
        if rc is None or _has_release(rc, version) is None:
            raise
    if state.repo(f"{STABLE}/{fmt}/{arch}") is None:
        raise UsageError(
            f"the mirror holds {fmt}/{arch} in the experimental channel (release candidates) only and builds use "
            "stable unless told otherwise: pass --channel experimental to build a release candidate"
        )
    raise UsageError(
        f"the mirror's stable channel has no toolkit {version} for {fmt}/{arch}, its experimental channel "
        "(release candidates) has: pass --channel experimental to build a release candidate"
    )


def _has_release(repo: RepoRecord, version: str) -> Release | None:
    try:
        return _pick_release(repo, version)
    except (SourceError, SelectorError):
        return None


def _listing_index(mirror: Path, repo: RepoRecord, release: Release) -> RepoProvenance:
    """The signed index that lists ``release``: the current one, else one kept by ``--allow-older-index``."""
    wanted = set(release.packages)
    if not repo.retained or wanted <= set(index_entries(mirror, repo, repo.provenance)):
        return repo.provenance
    return next((i for i in repo.retained if wanted <= set(index_entries(mirror, repo, i))), repo.provenance)


def _source_package(mirror: Path, pkg: StoredPackage, entries: dict[str, Package]) -> SourcePackage:
    """The mirror file of ``pkg``, with the signed index entry it was fetched for (the builder checks its header against it)."""
    entry = entries.get(pkg.path)
    if entry is None:
        raise SourceError(
            f"the mirror's signed index does not list {pkg.path}, which its state holds (an older gpu-airgap "
            "took an older index over it: `mirror verify` lists every such release); sync again from an "
            "upstream that lists it, or build another --version"
        )
    if not _same(
        pkg,
        LockedPackage(
            entry.name, entry.version, entry.arch, entry.filename, entry.size, "", entry.sha256, entry.sha512
        ),
    ):
        raise ChecksumMismatch(
            f"{pkg.path} (as the mirror's state records it, against its signed index entry)",
            entry.sha512 or entry.sha256 or "",
            pkg.sha512 or pkg.sha256 or "",
        )
    return SourcePackage(
        name=pkg.name,
        version=pkg.version,
        arch=pkg.arch,
        path=pkg.local_path(mirror),
        size=pkg.size,
        sha256=pkg.sha256,
        sha512=pkg.sha512,
        origin=pkg.url,
        entry=entry,
    )


def _pick_release(repo: RepoRecord, version: str) -> Release:
    """The newest release of ``repo`` that the ``--version`` selector accepts, as ``mirror sync`` chooses."""
    if not repo.releases:
        raise SourceError(f"the mirror's {repo.key} repository holds no toolkit release")
    selector = VersionSelector.parse(version)
    if selector.kind == "all":
        raise SelectorError(
            version, "a bundle carries one release; use latest, a version, a wildcard or a range"
        )
    fmt = PackageFormat(repo.format)
    chosen = selector.choose([r.toolkit_version for r in repo.releases], fmt)
    if chosen is not None:
        return next(r for r in repo.releases if r.toolkit_version == chosen)
    have = ", ".join(r.toolkit_version for r in repo.releases)
    raise MissingRelease(
        f"the mirror's {repo.key} repository has no toolkit {selector} (it has {have}); sync it first"
    )


def _locked_release(repo: RepoRecord, target: LockedTarget) -> Release:
    """The mirror's release whose packages are exactly the locked ones (by identity and checksum).

    A lock of a full mirror (``sync --version all``) lists the whole index: then the release is
    the locked toolkit version, provided every one of its packages is locked as held.
    """
    for release in repo.releases:
        held = [repo.package(path) for path in release.packages]
        if len(held) == len(target.packages) and all(_same(h, w) for h, w in zip(held, target.packages)):
            return release
    for release in repo.releases:
        if release.toolkit_version == target.toolkit_version and len(target.packages) > len(release.packages):
            held = [repo.package(path) for path in release.packages]
            if all(any(_same(h, w) for w in target.packages) for h in held):
                return release
    raise MissingRelease(
        f"the mirror's {repo.key} repository does not hold the locked set for toolkit {target.toolkit_version}; "
        "run `gpu-airgap mirror sync --locked` first"
    )


def _same(held: StoredPackage, wanted: LockedPackage) -> bool:
    if (held.name, held.version, held.arch, held.size) != (
        wanted.name,
        wanted.version,
        wanted.arch,
        wanted.size,
    ):
        return False
    # A digest recorded on both sides must agree; at least one must be comparable.
    pairs = [(held.sha256, wanted.sha256), (held.sha512, wanted.sha512)]
    comparable = [(a, b) for a, b in pairs if a and b]
    return bool(comparable) and all(a == b for a, b in comparable)
