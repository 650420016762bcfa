"""``mirror import-archive``: take NVIDIA's release archive of the four packages into a mirror.

NVIDIA attaches ``nvidia-container-toolkit_<version>_<deb|rpm>_<arch>.tar.gz`` to each GitHub release
of NVIDIA/nvidia-container-toolkit (its ``hack/prepare-artifacts.sh``): a gzipped tar of regular files
named ``release-v<version>-<stable|experimental>/packages/<ubuntu18.04|centos7>/<arch>/<package file>``,
with no directory entries and no signature of its own. So each package is taken only when the signed
index the mirror already holds for that repository lists it with the same size and digest; the
archive's bytes are hashed while they are copied into staging and nothing reads a package before its
digest matched. A package no held index lists is refused as unverifiable.

Members are contained: an absolute name, ``..``, a link, a device or any other non-regular member
refuses the whole archive. Like a sync, the import stages the packages and the new ``state.json``
and switches them in together (:class:`mirror.sync.transaction.Transaction`).
"""

from __future__ import annotations

import gzip
import hashlib
import re
import tarfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import IO, Final

from mirror.disk import store
from mirror.index import vouched
from mirror.index.entries import signed_entries
from mirror.index.header import check_agrees, read_header
from mirror.index.repo import clean_relative
from mirror.model import EXPERIMENTAL, STABLE, Package, PackageFormat
from mirror.release.selectors import VersionSelector
from mirror.release.versions import sort_key
from mirror.sync.merge import stored_package
from mirror.sync.resolve import resolve
from mirror.sync.targets import ReleasePlan
from mirror.sync.transaction import Transaction
from plumbing.errors import (
    ChecksumMismatch,
    ExitCode,
    ToolError,
    UnsafePathError,
    UsageError,
    VerificationError,
)

CHUNK: Final = 1024 * 1024
#: NVIDIA's name for the archive; the arch is ``amd64``/``arm64`` (deb) or ``x86_64``/``aarch64`` (rpm)
ARCHIVE_NAME: Final = re.compile(
    r"nvidia-container-toolkit_(?P<version>[0-9][A-Za-z0-9.~+-]*)_(?P<format>deb|rpm)_(?P<arch>[a-z0-9_]+)\.tar\.gz"
)


RELEASES: Final = "https://github.com/NVIDIA/nvidia-container-toolkit/releases/download"


class UnverifiableArchive(VerificationError):
    """The archive holds a package no signed index the mirror holds lists."""


class IncompleteRelease(ToolError):
    """Neither the archive nor the mirror holds a package the archive's release needs."""

    exit_code = ExitCode.UNRESOLVABLE


@dataclass(frozen=True)
class ArchiveName:
    """What NVIDIA's file name says about a release archive."""

    version: str  #: the release as tagged, without the ``v``: ``1.17.8``, ``1.18.0-rc.1``
    format: PackageFormat
    arch: str

    @property
    def channel(self) -> str:
        """Release candidates go to the experimental channel, as NVIDIA's release scripts decide."""
        return EXPERIMENTAL if "rc." in self.version else STABLE

    @property
    def repo_key(self) -> str:
        """The mirror's directory for this archive's packages: ``stable/deb/amd64``."""
        return f"{self.channel}/{self.format.value}/{self.arch}"

    @property
    def release_url(self) -> str:
        """Where NVIDIA publishes this archive: an asset of the toolkit's GitHub release ``v<version>``."""
        file = f"nvidia-container-toolkit_{self.version}_{self.format.value}_{self.arch}.tar.gz"
        return f"{RELEASES}/v{self.version}/{file}"

    @classmethod
    def parse(cls, path: Path) -> ArchiveName:
        """:raises UsageError: when ``path`` is not named as NVIDIA names its release archives."""
        match = ARCHIVE_NAME.fullmatch(path.name)
        if match is None:
            raise UsageError(
                f"{path.name} is not named like NVIDIA's release archives "
                "(nvidia-container-toolkit_<version>_<deb|rpm>_<arch>.tar.gz)"
            )
        return cls(match["version"], PackageFormat(match["format"]), match["arch"])


@dataclass(frozen=True)
class ImportResult:
    """What one import took into the mirror."""

    archive: str
    repo: str
    toolkit_version: str
    imported: tuple[str, ...]  #: paths under the mirror of the packages taken from the archive
    already_held: tuple[str, ...]  #: the release's packages the mirror held already, unchanged
    vouched: tuple[
        str, ...
    ] = ()  #: of ``imported``, those taken on the operator's word (``--trust-archive``)


def import_archive(archive: Path, mirror: Path, *, trust: bool = False) -> ImportResult:
    """Take the packages of NVIDIA's release ``archive`` into ``mirror``, each checked against its signed index.

    :raises UsageError: when the file is missing or not named like NVIDIA's archives.
    :raises MirrorStateError: when ``mirror`` holds no mirror.
    :param trust: the operator vouches for packages no signed index lists (``--trust-archive``): they are
        taken with a vouched index (:mod:`mirror.index.vouched`) as their provenance.
    :raises UnverifiableArchive: when a package is not listed by the signed index the mirror holds (without ``trust``).
    :raises ChecksumMismatch: when a package differs from its signed index entry.
    :raises UnsafePathError | VerificationError: for a member that is not a contained regular file.
    :raises BusyError: when another sync or import holds the mirror.
    """
    if not archive.is_file():
        raise UsageError(f"the archive {archive} does not exist or is not a file")
    name = ArchiveName.parse(archive)
    with store.locked(mirror):
        if trust and not store.state_path(mirror).exists():
            state = store.MirrorState(upstream=f"archive:{archive.name}", channel=name.channel)
        else:
            state = store.MirrorState.load(mirror)
        txn = Transaction(mirror)
        try:
            result = _import_locked(archive, name, mirror, state, txn, trust)
        except BaseException:
            txn.abort()
            raise
    return result


def _import_locked(
    archive: Path, name: ArchiveName, mirror: Path, state: store.MirrorState, txn: Transaction, trust: bool
) -> ImportResult:
    repo = state.repo(name.repo_key)
    if repo is None and not trust:
        raise UnverifiableArchive(
            f"{archive.name}: the mirror holds no signed index for {name.repo_key}, so its packages cannot be "
            f"verified; sync that repository first (`gpu-airgap mirror sync --format {name.format.value} "
            f"--arch {name.arch}`), or pass --trust-archive to vouch for the archive yourself"
        )
    entries = signed_entries(mirror, repo, every=True) if repo is not None else {}  # the release's others too
    by_file = {PurePosixPath(path).name: (path, entry) for path, entry in entries.items()}
    imported, unlisted = _take_members(archive, name, by_file, txn, trust)
    for path, entry in imported.items():  # digests matched: now the headers may be read
        check_agrees(read_header(txn.staging_path(path), entry.format.value, what=path), entry, what=path)
    if repo is None:
        repo = store.RepoRecord(
            key=name.repo_key,
            format=name.format.value,
            arch=name.arch,
            channel=name.channel,
            base_url=name.release_url,
            provenance=store.RepoProvenance(vouched.VOUCHED, None, ()),
            packages=(),
            releases=(),
        )
    if unlisted:
        repo, taken = _vouch(archive, repo, unlisted, txn)
        entries.update(taken)
        imported.update(taken)
    release = _release(archive, name, entries, imported, repo)
    # a vouched package's origin is the archive it came in (the SBOM's downloadLocation), not an index's URL
    origins = {path: f"{name.release_url}#{PurePosixPath(path).name}" for path in unlisted}
    state = _with_release(state, repo, release, imported, entries, origins)
    txn.commit(state)
    held = tuple(p for p in (entries_path(entries, p) for p in release.packages) if p not in imported)
    return ImportResult(
        archive=str(archive),
        repo=repo.key,
        toolkit_version=release.toolkit_version,
        imported=tuple(sorted(imported)),
        already_held=held,
        vouched=tuple(sorted(unlisted)),
    )


def _vouch(
    archive: Path, repo: store.RepoRecord, unlisted: dict[str, _Copied], txn: Transaction
) -> tuple[store.RepoRecord, dict[str, Package]]:
    """Take the packages no signed index lists on the operator's word: their headers make a vouched index."""
    taken: dict[str, Package] = {}
    listed = []
    for path, copied in sorted(unlisted.items()):
        header = read_header(txn.staging_path(path), repo.format, what=path)  # vouched for: it may be read
        file_name = PurePosixPath(path).name
        taken[path] = vouched.entry_of(header, file_name, copied.size, copied.sha256, copied.sha512)
        listed.append((header, file_name, copied.size, copied.sha256, copied.sha512))
    data = vouched.render(archive.name, store.file_digest(archive, "sha256"), listed)
    index_path = f"{repo.key}/{vouched.DIRECTORY}/{archive.name}.json"
    txn.stage_metadata(index_path, data)
    index = store.RepoProvenance(
        vouched.VOUCHED,
        None,
        (store.StoredFile(index_path, len(data), sha512=hashlib.sha512(data).hexdigest()),),
    )
    if not repo.provenance.signed_files:  # a repo only this archive made: the vouched index is its index
        return replace(repo, provenance=index), taken
    others = tuple(r for r in repo.retained if r.signed_files[:1] != index.signed_files[:1])
    return replace(repo, retained=(index, *others)), taken


def entries_path(entries: dict[str, Package], pkg: Package) -> str:
    """The mirror path the signed index gives ``pkg``."""
    return next(path for path, entry in entries.items() if entry is pkg)


@dataclass(frozen=True)
class _Copied:
    """A package member copied into staging, with the size and digests of its bytes."""

    size: int
    sha256: str
    sha512: str


def _take_members(
    archive: Path, name: ArchiveName, by_file: dict[str, tuple[str, Package]], txn: Transaction, trust: bool
) -> tuple[dict[str, Package], dict[str, _Copied]]:
    """Copy each package member into staging, hashing it: path -> its signed entry, and (``trust``) path ->
    what was copied of the packages no signed index lists."""
    imported: dict[str, Package] = {}
    unlisted: dict[str, _Copied] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for info in tar:
                member = _contained(info, archive)
                file_name = PurePosixPath(member).name
                if info.isdir() or not file_name.endswith(f".{name.format.value}"):
                    continue
                path, entry = by_file.get(file_name, (f"{name.repo_key}/{file_name}", None))
                if path in imported or path in unlisted:
                    raise VerificationError(f"{archive.name} holds {file_name} twice")
                if entry is None and not trust:
                    unlisted[path] = _Copied(info.size, "", "")  # refused below, after every name is known
                    continue
                source = tar.extractfile(info)
                assert source is not None  # a regular file (checked by _contained)
                copied = _copy(source, txn.package_target(path))
                if entry is None:
                    unlisted[path] = copied
                else:
                    _check(copied, entry, f"{archive.name}:{member}")
                    imported[path] = entry
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise VerificationError(f"{archive.name} is not a readable gzipped tar archive ({exc})") from exc
    if unlisted and not trust:
        files = ", ".join(sorted(PurePosixPath(p).name for p in unlisted))
        raise UnverifiableArchive(
            f"{archive.name}: the mirror's signed {name.repo_key} index does not list {files}, so the archive "
            "cannot be verified; sync the mirror from an upstream whose index lists it, or pass --trust-archive "
            "to vouch for the archive yourself"
        )
    if not imported and not unlisted:
        raise VerificationError(f"{archive.name} holds no {name.format.value} packages")
    return imported, unlisted


def _contained(info: tarfile.TarInfo, archive: Path) -> str:
    """The member's clean relative name; refuses links, devices and names that leave the archive."""
    member = clean_relative(info.name, archive.name)
    if not (info.isfile() or info.isdir()):
        raise UnsafePathError(
            info.name, f"{archive.name} (a link or special file; only regular files are taken)"
        )
    return member


def _copy(source: IO[bytes], target: Path) -> _Copied:
    """Copy a member to ``target``, hashing its bytes on the way."""
    sha256, sha512, size = hashlib.sha256(), hashlib.sha512(), 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        while block := source.read(CHUNK):
            sha256.update(block)
            sha512.update(block)
            size += len(block)
            out.write(block)
    return _Copied(size, sha256.hexdigest(), sha512.hexdigest())


def _check(copied: _Copied, entry: Package, what: str) -> None:
    """The copied bytes must have the size and digest of their signed ``entry``."""
    algo, expected = ("sha512", entry.sha512) if entry.sha512 else ("sha256", entry.sha256 or "")
    actual = copied.sha512 if algo == "sha512" else copied.sha256
    if copied.size != entry.size:
        raise ChecksumMismatch(
            f"{what} ({copied.size} bytes, its signed index entry {entry.size})", expected, actual
        )
    if actual != expected.lower():
        raise ChecksumMismatch(what, expected, actual)


def _release(
    archive: Path,
    name: ArchiveName,
    entries: dict[str, Package],
    imported: dict[str, Package],
    repo: store.RepoRecord,
) -> ReleasePlan:
    """The toolkit release the archive brings, resolved within the signed index; all its packages must be at hand."""
    roots = [e for e in imported.values() if e.name == "nvidia-container-toolkit"]
    if len(roots) != 1:
        raise VerificationError(f"{archive.name} does not hold exactly one nvidia-container-toolkit package")
    release = ReleasePlan.of(
        resolve(list(entries.values()), VersionSelector.parse(roots[0].version), name.format)
    )
    held = {p.path for p in repo.packages}
    missing = [
        PurePosixPath(p.filename).name
        for p in release.packages
        if (path := entries_path(entries, p)) not in imported and path not in held
    ]
    if missing:
        raise IncompleteRelease(
            f"{archive.name} and the mirror lack {', '.join(missing)}, which toolkit {release.toolkit_version} needs"
        )
    return release


def _with_release(
    state: store.MirrorState,
    repo: store.RepoRecord,
    release: ReleasePlan,
    imported: dict[str, Package],
    entries: dict[str, Package],
    origins: dict[str, str],
) -> store.MirrorState:
    """``state`` with the imported packages (from ``origins``, else the index's URL) and the release recorded in ``repo``."""
    packages = {p.path: p for p in repo.packages}
    for path, entry in imported.items():
        url = origins.get(path) or f"{repo.base_url}/{clean_relative(entry.filename, repo.base_url)}"
        packages[path] = stored_package(path, entry, url)
    record = store.Release(
        toolkit_version=release.toolkit_version,
        packages=tuple(entries_path(entries, p) for p in release.packages),
        node_requirements=release.node_requirements,
        breaks=release.breaks,
    )
    releases = [r for r in repo.releases if r.toolkit_version != record.toolkit_version] + [record]
    releases.sort(key=lambda r: sort_key(PackageFormat(repo.format))(r.toolkit_version))
    updated = replace(
        repo, packages=tuple(sorted(packages.values(), key=lambda p: p.path)), releases=tuple(releases)
    )
    others = tuple(r for r in state.repos if r.key != repo.key)
    return replace(state, repos=tuple(sorted((*others, updated), key=lambda r: r.key)))
