"""Open a bundle file as one decompressed byte stream, whole or split into parts.

Compression is detected from the first bytes, never from the file name: zstd, xz, gzip, or a
plain tar. xz and gzip use the standard library. zstd uses the ``zstandard`` module when it is
importable (the connected host has it) and otherwise the ``zstd`` binary through
:class:`plumbing.proc.FilterPipe` — nodes have only ``python3``, so a node without the ``zstd``
command needs a bundle built with ``--compression xz`` or ``gzip``.

A split bundle (``--split SIZE``) is ``FILE.part001``, ``FILE.part002``, … plus ``FILE.sha256sums``
(``sha256sum`` format) and its detached signature ``FILE.sha256sums.asc``. Opening the first part
checks the list's signature (when a verifier is given), then reads the parts in order and checks
each one's sha256 as its last byte goes by. Memory never grows with the bundle's size.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import lzma
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, List, Optional, Protocol, Tuple, Union

from plumbing.errors import ChecksumMismatch, ToolError, VerificationError
from plumbing.proc import FilterPipe

CHUNK = 1 << 20
_PART_RE = re.compile(r"^(?P<base>.+)\.part(?P<num>\d{3})$")
_MAGIC = {
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\xfd7zXZ\x00": "xz",
    b"\x1f\x8b": "gzip",
}
MAX_PARTS = 999
#: Decode zstd in pieces this large: zstandard checks a frame's checksum only at its end and then
#: returns nothing of a damaged frame, so with smaller pieces the members before the damage are
#: read (``inspect`` works, ``verify`` names the member), as with the ``zstd`` command on a node.
_ZSTD_BUFFER = 128 << 10


class Signed(Protocol):
    """Who made a good signature."""

    @property
    def fingerprint(self) -> str:
        """Primary-key fingerprint of the signer."""


class SignatureCheck(Protocol):
    """What the bundle reader needs from a keyring (:class:`plumbing.gpg.Keyring`): check a detached signature."""

    def verify_detached(self, data: bytes, signature: bytes, *, what: str = ...) -> Signed:
        """Return who signed ``data``, or raise :class:`~plumbing.errors.SignatureError`."""


class BundleOpenError(VerificationError):
    """The bundle file (or one of its parts) cannot be read as a bundle."""


def detect_compression(head: bytes) -> str:
    """Name the compression of a stream from its first bytes: ``zstd``, ``xz``, ``gzip`` or ``none``."""
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    return "none"


def split_parts(path: Path) -> Optional[Tuple[Path, List[Path]]]:
    """For ``FILE.part001`` return ``(FILE, [parts in order])``; None when ``path`` is not a first part."""
    match = _PART_RE.match(path.name)
    if not match:
        return None
    if match.group("num") != "001":
        raise BundleOpenError(f"{path.name} is not the first part; pass {match.group('base')}.part001")
    base = path.with_name(match.group("base"))
    parts = [path]
    while len(parts) < MAX_PARTS:
        nxt = path.with_name(f"{base.name}.part{len(parts) + 1:03d}")
        if not nxt.exists():
            break
        parts.append(nxt)
    return base, parts


def read_checksum_list(base: Path, verifier: Optional[SignatureCheck]) -> dict[str, str]:
    """Read ``FILE.sha256sums`` (checking ``.asc`` with ``verifier`` when given): part name -> sha256."""
    listing = base.with_name(base.name + ".sha256sums")
    try:
        data = listing.read_bytes()
        signature = listing.with_name(listing.name + ".asc").read_bytes() if verifier is not None else b""
    except OSError as exc:
        raise BundleOpenError(
            f"cannot read the checksum list of split bundle {base.name}: {exc.strerror or exc}"
        ) from exc
    if verifier is not None:
        verifier.verify_detached(data, signature, what=listing.name)
    sums: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split()
        if len(fields) != 2 or not re.match(r"^[0-9a-f]{64}$", fields[0]):
            raise BundleOpenError(f"{listing.name} has a malformed line {line[:60]!r}")
        sums[fields[1].lstrip("*")] = fields[0]
    return sums


class _PartsReader(io.RawIOBase):
    """Concatenate parts, hashing each one and failing at its end if it does not match its listed sha256."""

    def __init__(self, parts: List[Path], sums: dict[str, str]) -> None:
        super().__init__()
        names = [p.name for p in parts]
        if sorted(sums) != sorted(names):
            missing = sorted(set(sums) - set(names))
            extra = sorted(set(names) - set(sums))
            detail = f"missing {', '.join(missing)}" if missing else f"unlisted {', '.join(extra)}"
            raise BundleOpenError(f"the split bundle's parts do not match its checksum list ({detail})")
        self._parts = list(parts)
        self._sums = sums
        self._fh: Optional[BinaryIO] = None
        self._hash = hashlib.sha256()
        self._current: Optional[Path] = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Union[bytearray, memoryview]) -> int:  # type: ignore[override]
        while True:
            if self._fh is None:
                if not self._parts:
                    return 0
                self._current = self._parts.pop(0)
                self._fh = open(self._current, "rb")  # noqa: SIM115 (closed at its end)
                self._hash = hashlib.sha256()
            n = self._fh.readinto(buffer)  # type: ignore[attr-defined]
            if n:
                self._hash.update(memoryview(buffer)[:n])
                return int(n)
            self._fh.close()
            self._fh = None
            assert self._current is not None
            expected = self._sums[self._current.name]
            actual = self._hash.hexdigest()
            if actual != expected:
                raise ChecksumMismatch(f"part {self._current.name}", expected, actual)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        super().close()


@contextlib.contextmanager
def open_raw(path: Path, verifier: Optional[SignatureCheck] = None) -> Iterator[BinaryIO]:
    """Open the bundle's compressed bytes: the file itself or its parts in order."""
    split = split_parts(path)
    try:
        if split is None:
            raw: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed by the with below)
        else:
            base, parts = split
            raw = io.BufferedReader(_PartsReader(parts, read_checksum_list(base, verifier)), CHUNK)
    except OSError as exc:
        raise BundleOpenError(f"cannot read bundle {path}: {exc.strerror or exc}") from exc
    with raw:
        yield raw


@contextlib.contextmanager
def open_stream(path: Path, verifier: Optional[SignatureCheck] = None) -> Iterator[BinaryIO]:
    """Open a bundle as its decompressed tar stream.

    :param path: the bundle, or the first part of a split bundle.
    :param verifier: checks the split checksum list's signature; None only for ``inspect``.
    :raises BundleOpenError: when the file cannot be read.
    :raises ToolError: when zstd is needed but neither the module nor the command is available.
    """
    with open_raw(path, verifier) as raw:
        head = raw.peek(8)[:8] if hasattr(raw, "peek") else b""
        kind = detect_compression(head)
        if kind == "none":
            yield raw
        elif kind == "gzip":
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield stream  # type: ignore[misc,unused-ignore]
        elif kind == "xz":
            with lzma.LZMAFile(raw, mode="rb") as stream:
                yield stream  # type: ignore[misc,unused-ignore]
        else:
            with _zstd_reader(raw) as stream:
                yield stream


@contextlib.contextmanager
def _zstd_reader(raw: BinaryIO) -> Iterator[BinaryIO]:
    if _have_zstandard():
        import zstandard  # optional: present on the connected host, rarely on a node

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
        with io.BufferedReader(_DamageAsOSError(reader, zstandard.ZstdError), _ZSTD_BUFFER) as stream:
            yield stream
        return
    try:
        pipe = FilterPipe(["zstd", "-dcq"], raw)
    except ToolError as exc:
        raise ToolError(
            "this bundle is zstd-compressed but neither the zstd command nor the python zstandard module is available; install zstd or rebuild with --compression xz"
        ) from exc
    with pipe:
        yield pipe.stdout  # type: ignore[misc]


class DamagedStream(OSError):
    """The compressed stream cannot be decoded: a flipped byte, a truncated file, parts in the wrong order."""


class _DamageAsOSError(io.RawIOBase):
    """Read through ``inner``, turning the decoder's own error type into :class:`DamagedStream`.

    The readers of a bundle treat an ``OSError`` while streaming as "damaged or truncated" (as
    they do for xz, gzip and the ``zstd`` command), so the zstandard module must not leak its
    ``ZstdError`` past them.
    """

    def __init__(self, inner: BinaryIO, error: type[Exception]) -> None:
        super().__init__()
        self._inner = inner
        self._error = error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Union[bytearray, memoryview]) -> int:  # type: ignore[override]
        try:
            return int(self._inner.readinto(buffer))  # type: ignore[attr-defined]
        except self._error as exc:
            raise DamagedStream(str(exc)) from exc

    def close(self) -> None:
        self._inner.close()
        super().close()


def _have_zstandard() -> bool:
    import importlib.util

    return importlib.util.find_spec("zstandard") is not None
