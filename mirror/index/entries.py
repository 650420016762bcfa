"""The signed index entries of the packages a mirror holds, read back from the mirror itself.

``mirror sync`` keeps the verified metadata of each repo (``InRelease`` + ``Packages.xz``, or
``repodata/repomd.xml`` + its ``.asc`` + primary) and records their size and digest in
``state.json``. A bundle build needs the entry each package was fetched for, to compare with
the package's own header (:mod:`mirror.index.header`): the index file is checked against the digest
the state recorded (verify), then parsed (exactly those bytes).
"""

from __future__ import annotations

import gzip
import io
import lzma
import zlib
from pathlib import Path

from mirror.disk.store import RepoProvenance, RepoRecord, StoredFile
from mirror.errors import MetadataError, MirrorStateError, PackageChangedError
from mirror.index import vouched
from mirror.index.apt import iter_packages
from mirror.index.repo import PACKAGES_INDEXES, check_digest, clean_relative, decompressing
from mirror.index.rpm import iter_primary, parse_repomd
from mirror.model import Package
from plumbing.errors import ChecksumMismatch


def signed_entries(mirror: Path, repo: RepoRecord, *, every: bool = False) -> dict[str, Package]:
    """Path under the mirror (``stable/deb/amd64/x.deb``) -> the signed index entry that names it.

    The current index wins; indexes retained by a sync with ``--allow-older-index`` add the
    entries of the held releases it no longer lists. Only the entries of package names the repo
    holds are read (a CUDA repository's index lists thousands of others), unless ``every``.

    :raises MirrorStateError: when the state records no index for the repo.
    :raises PackageChangedError: when an index file no longer matches its recorded digest.
    :raises MetadataError: when it cannot be parsed.
    """
    entries: dict[str, Package] = {}
    for index in reversed(repo.indexes):
        entries.update(index_entries(mirror, repo, index, every=every))
    return entries


def index_entries(
    mirror: Path, repo: RepoRecord, index: RepoProvenance, *, every: bool = False
) -> dict[str, Package]:
    """The entries of one recorded signed index of ``repo`` (its current one, or a retained one):
    those of the package names the repo holds, or, with ``every``, all of them."""
    names = None if every else frozenset(p.name for p in repo.packages)
    recorded = {f.path: f for f in index.signed_files}
    top = index.directory or repo.key
    if index.fingerprint == vouched.VOUCHED:
        packages = _vouched(mirror, index)
    elif repo.format == "deb":
        name = next((f"{top}/{n}" for n in PACKAGES_INDEXES if f"{top}/{n}" in recorded), None)
        if name is None:
            raise MirrorStateError(mirror, f"it records no Packages index for {repo.key}; sync it again")
        data = _verified(mirror, recorded[name])
        try:
            text = decompressing(io.BytesIO(data), name).read().decode("utf-8")
        except (lzma.LZMAError, EOFError, UnicodeDecodeError, zlib.error, gzip.BadGzipFile) as exc:
            raise MetadataError(f"{mirror}/{name}", f"cannot be decoded ({exc})") from exc
        packages = list(iter_packages(io.StringIO(text), names=names))
    else:
        repomd_path = f"{top}/repodata/repomd.xml"
        if repomd_path not in recorded:
            raise MirrorStateError(mirror, f"it records no repomd.xml for {repo.key}; sync it again")
        primary = parse_repomd(_verified(mirror, recorded[repomd_path])).data.get("primary")
        path = f"{top}/{clean_relative(primary.href, top)}" if primary is not None else ""
        if path not in recorded:
            raise MirrorStateError(mirror, f"it records no primary index for {repo.key}; sync it again")
        primaries = iter_primary(io.BytesIO(_verified(mirror, recorded[path])))
        packages = [p for p in primaries if names is None or p.name in names]
    return {f"{repo.key}/{clean_relative(p.filename, repo.key)}": p for p in packages}


def _vouched(mirror: Path, index: RepoProvenance) -> list[Package]:
    """The entries of an index the operator vouched for (``import-archive --trust-archive``)."""
    packages: list[Package] = []
    for stored in index.signed_files:
        try:
            packages += vouched.parse(_verified(mirror, stored))
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataError(f"{mirror}/{stored.path}", f"is not a vouched index ({exc})") from exc
    return packages


def _verified(mirror: Path, stored: StoredFile) -> bytes:
    """The bytes of a recorded metadata file, after they matched the recorded size and digest."""
    path = stored.local_path(mirror)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MirrorStateError(
            mirror, f"cannot read {stored.path} ({exc.strerror or exc}); sync it again"
        ) from exc
    algo, digest = ("sha512", stored.sha512) if stored.sha512 else ("sha256", stored.sha256 or "")
    try:
        check_digest(stored.path, data, algo, digest, stored.size)
    except ChecksumMismatch as exc:
        raise PackageChangedError(path, exc.expected, exc.actual) from exc
    return data
