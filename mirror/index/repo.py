"""Read one remote repository through an injected :class:`Fetcher`: verify, then parse.

apt (:func:`load_apt_repo`): ``InRelease`` -> verify the clearsigned text -> parse exactly that
text -> fetch ``Packages.xz`` (else ``Packages``) -> check SHA512 and size against the signed
Release -> decompress and parse as a stream.

yum (:func:`load_yum_repo`): ``repodata/repomd.xml`` + ``repomd.xml.asc`` -> verify the detached
signature -> parse -> fetch primary -> check the checksum and size repomd names -> stream-parse.

Each returns a :class:`RepoSnapshot`: the packages plus provenance (base URL, signer fingerprint,
signature time) and every metadata file's verified bytes with their sha256, so the mirror can
store exactly what was verified. This module does no I/O of its own: bytes come from the fetcher
(the real one, with requests and a conditional-GET cache, lives with the sync code), signature
checks from :class:`plumbing.gpg.Keyring`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import IO, Protocol, cast

from mirror.errors import MetadataError
from mirror.index.apt import ReleaseIndex, iter_packages, parse_release
from mirror.index.rpm import Repomd, iter_primary, open_decompressed, parse_repomd
from mirror.model import CHANNELS, Package, PackageFormat
from plumbing.arch import known_arch, normalize_arch
from plumbing.errors import ChecksumMismatch, ToolError, UnsafePathError, UsageError
from plumbing.gpg import Keyring


class Fetcher(Protocol):
    """Where metadata bytes come from; the sync code implements it over HTTP."""

    def get(self, url: str) -> bytes:
        """Return the body of ``url``.

        :raises ToolError: on failure after the fetcher's own retries; a missing file must raise
            one whose ``status`` attribute is 404 (``mirror.errors.FetchError(url, 404)``), which
            the readers treat as "not published" where a fallback exists (Packages.xz -> Packages).
        """
        ...


@dataclass(frozen=True)
class MetadataFile:
    """One verified metadata file: its path relative to the repo base and the exact bytes."""

    path: str  #: "InRelease", "Packages.xz", "repodata/repomd.xml", "repodata/<d>-primary.xml.gz"
    data: bytes = field(repr=False)
    sha256: str


@dataclass(frozen=True)
class RepoSnapshot:
    """A verified view of one remote repository and where its trust came from."""

    format: PackageFormat
    base_url: str  #: ``https://.../stable/deb/amd64`` (no trailing slash)
    packages: tuple[Package, ...]
    fingerprint: str  #: primary-key fingerprint that verified the signed root
    signed_at: datetime | None
    metadata: tuple[MetadataFile, ...]  #: signed root first, then what it vouches for
    release: ReleaseIndex | None = None  #: apt only
    repomd: Repomd | None = None  #: yum only

    def package_url(self, package: Package) -> str:
        """Absolute URL of ``package``'s file; refuses names that escape the repository."""
        return f"{self.base_url}/{clean_relative(package.filename, self.base_url)}"


def load_apt_repo(
    fetcher: Fetcher, base_url: str, keyring: Keyring, *, names: frozenset[str] | None = None
) -> RepoSnapshot:
    """Fetch, verify and parse a flat apt repository (``<base>/InRelease``, ``<base>/Packages.xz``).

    :param fetcher: where bytes come from.
    :param base_url: the repository base, e.g. ``https://nvidia.github.io/libnvidia-container/stable/deb/amd64``.
    :param keyring: the keys trusted to sign InRelease.
    :param names: read only the packages of these names (a CUDA repository's thousands of others are skipped).
    :raises SignatureError: when InRelease is not validly signed by the keyring.
    :raises MetadataError: when the signed Release is empty or names no index.
    :raises ChecksumMismatch: when the Packages index does not match the signed checksum or size.
    """
    base = base_url.rstrip("/")
    inrelease = fetcher.get(f"{base}/InRelease")
    verified = keyring.verify_clearsigned(inrelease, what=f"{base}/InRelease")
    release = parse_release(verified.text, f"the signed {base}/InRelease")
    index_bytes, name = _fetch_packages_index(fetcher, base, release)
    check_digest(
        f"{base}/{name}", index_bytes, "sha512", release.files[name].sha512, release.files[name].size
    )
    packages = tuple(_parse_apt_index(index_bytes, name, release, base, names))
    return RepoSnapshot(
        format=PackageFormat.DEB,
        base_url=base,
        packages=packages,
        fingerprint=verified.fingerprint,
        signed_at=verified.signed_at,
        metadata=(_metadata("InRelease", inrelease), _metadata(name, index_bytes)),
        release=release,
    )


def load_yum_repo(
    fetcher: Fetcher, base_url: str, keyring: Keyring, *, names: frozenset[str] | None = None
) -> RepoSnapshot:
    """Fetch, verify and parse a yum repository (``<base>/repodata/repomd.xml`` and its ``.asc``).

    :raises SignatureError: when repomd.xml is not validly signed by the keyring.
    :raises MetadataError: when repomd names no primary index or primary is malformed.
    :raises ChecksumMismatch: when primary does not match the checksum or size repomd names.
    """
    base = base_url.rstrip("/")
    repomd_bytes = fetcher.get(f"{base}/repodata/repomd.xml")
    signature = fetcher.get(f"{base}/repodata/repomd.xml.asc")
    verification = keyring.verify_detached(repomd_bytes, signature, what=f"{base}/repodata/repomd.xml")
    repomd = parse_repomd(repomd_bytes)
    primary = repomd.data.get("primary")
    if primary is None:
        raise MetadataError(f"{base}/repodata/repomd.xml", "names no primary index")
    href = clean_relative(primary.href, base)
    primary_bytes = fetcher.get(f"{base}/{href}")
    check_digest(f"{base}/{href}", primary_bytes, primary.checksum_type, primary.checksum, primary.size)
    hasher = _HashingReader(open_decompressed(io.BytesIO(primary_bytes)), primary.open_checksum_type)
    packages = tuple(
        p
        for p in iter_primary(hasher)  # type: ignore[arg-type]
        if names is None or p.name in names
    )
    if primary.open_checksum and hasher.hexdigest() not in (None, primary.open_checksum):
        raise ChecksumMismatch(
            f"{base}/{href} (uncompressed)", primary.open_checksum, hasher.hexdigest() or ""
        )
    return RepoSnapshot(
        format=PackageFormat.RPM,
        base_url=base,
        packages=packages,
        fingerprint=verification.fingerprint,
        signed_at=verification.signed_at,
        metadata=(
            _metadata("repodata/repomd.xml", repomd_bytes),
            _metadata("repodata/repomd.xml.asc", signature),
            _metadata(href, primary_bytes),
        ),
        repomd=repomd,
    )


def check_digest(what: str, data: bytes, algorithm: str, expected: str, size: int | None) -> None:
    """Check ``data`` against a signed size and digest (``sha256``/``sha512``; ``sha`` is sha1).

    :raises ChecksumMismatch: on a size or digest difference, or an algorithm we do not accept.
    """
    if size is not None and len(data) != size:
        raise ChecksumMismatch(f"{what} (size)", f"{size} bytes", f"{len(data)} bytes")
    algorithm = {"sha": "sha1"}.get(algorithm, algorithm)
    if algorithm not in ("sha256", "sha512"):
        raise ChecksumMismatch(what, f"a sha256 or sha512 digest, not {algorithm}", "unverifiable")
    actual = hashlib.new(algorithm, data).hexdigest()
    if actual != expected.lower():
        raise ChecksumMismatch(what, expected, actual)


def repo_path(channel: str, fmt: PackageFormat, arch: str) -> str:
    """Relative path of one repository under the upstream root: ``stable/deb/amd64``.

    :raises UsageError: for an unknown channel or arch.
    """
    if channel not in CHANNELS:
        raise UsageError(f"unknown channel {channel!r}; use stable or experimental")
    return f"{channel}/{fmt.value}/{normalize_arch(known_arch(arch), fmt)}"


def repo_url(upstream: str, channel: str, fmt: PackageFormat, arch: str) -> str:
    """Base URL of one repository: ``<upstream>/stable/rpm/x86_64``."""
    return f"{upstream.rstrip('/')}/{repo_path(channel, fmt, arch)}"


def clean_relative(path: str, root: str) -> str:
    """Normalise a metadata path (``./x.deb``) and refuse absolute paths, ``..`` and odd characters.

    :raises UnsafePathError: when the path could leave the repository.
    """
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path or "\x00" in path or "?" in path:
        raise UnsafePathError(path, root)
    parts = [part for part in pure.parts if part != "."]
    if not parts:
        raise UnsafePathError(path, root)
    return "/".join(parts)


#: the names of an apt Packages index, preferred first
PACKAGES_INDEXES = ("Packages.xz", "Packages.gz", "Packages")


def decompressing(raw: IO[bytes], name: str) -> IO[bytes]:
    """A stream of the uncompressed ``Packages`` inside ``raw``, an index called ``name``."""
    if name.endswith(".xz"):
        return cast(IO[bytes], lzma.LZMAFile(raw))
    if name.endswith(".gz"):
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw))
    return raw


def _fetch_packages_index(fetcher: Fetcher, base: str, release: ReleaseIndex) -> tuple[bytes, str]:
    # NVIDIA's toolkit repositories list Packages.xz, its CUDA repositories Packages.gz
    names = [name for name in PACKAGES_INDEXES if name in release.files]
    if not names:
        raise MetadataError(f"{base}/InRelease", "lists neither Packages.xz, Packages.gz nor Packages")
    for name in names[:-1]:
        try:
            return fetcher.get(f"{base}/{name}"), name
        except ToolError as exc:
            if getattr(exc, "status", None) != 404:
                raise
    return fetcher.get(f"{base}/{names[-1]}"), names[-1]


def _parse_apt_index(
    data: bytes, name: str, release: ReleaseIndex, base: str, names: frozenset[str] | None = None
) -> Iterator[Package]:
    """Decompress and parse as a stream; also check the uncompressed Packages if Release lists it."""
    raw = decompressing(io.BytesIO(data), name)
    expected = release.files.get("Packages") if name != "Packages" else None
    hasher = _HashingReader(raw, "sha512" if expected else None)
    text = io.TextIOWrapper(hasher, encoding="utf-8")  # type: ignore[type-var]
    try:
        yield from iter_packages(text, names=names)
    except (lzma.LZMAError, EOFError, UnicodeDecodeError, zlib.error, gzip.BadGzipFile) as exc:
        raise MetadataError(f"{base}/{name}", f"cannot be decoded ({exc})") from exc
    if expected is not None:
        check = hasher.hexdigest() or ""
        if hasher.size != expected.size or check != expected.sha512:
            raise ChecksumMismatch(f"{base}/Packages (inside {name})", expected.sha512, check)


class _HashingReader(io.RawIOBase):
    """A read-through stream that hashes (and counts) what passes through it."""

    def __init__(self, inner: IO[bytes], algorithm: str | None) -> None:
        self._inner = inner
        self._hash = hashlib.new(algorithm) if algorithm in ("sha256", "sha512") else None
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._inner.read(len(buffer))
        if self._hash is not None:
            self._hash.update(chunk)
        self.size += len(chunk)
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def hexdigest(self) -> str | None:
        return self._hash.hexdigest() if self._hash is not None else None


def _metadata(path: str, data: bytes) -> MetadataFile:
    return MetadataFile(path, data, hashlib.sha256(data).hexdigest())
