"""Write a deterministic, streaming, optionally compressed and split tar archive.

Determinism: members are added in the order the caller gives (the builder sorts them), every
header has mtime = SOURCE_DATE_EPOCH (or 0), uid/gid 0, empty user/group names, mode 0644 or
0755, GNU format (no pax time records). zstd runs at a fixed level in one thread without the
content-size field; gzip writes mtime 0 and no file name. So the same inputs give the same bytes.

Streaming: file members are copied in 1 MiB chunks straight from their source into the
compressor, hashed on the way (the caller compares with the digest it put in the manifest),
so memory stays flat whatever the archive's size.

Nothing has its final name until :meth:`BundleWriter.commit`: output goes to temporary files
beside the target, removed by :meth:`BundleWriter.abort` (or on an exception in the ``with``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import lzma
import os
import tarfile
import tempfile
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

import zstandard

from configure.errors import ChecksumMismatch, ToolError, UsageError

CHUNK: Final = 1 << 20
ZSTD_LEVEL: Final = 3
COMPRESSIONS: Final = ("zstd", "xz", "gzip", "none")
SUFFIX: Final = {"zstd": ".tar.zst", "xz": ".tar.xz", "gzip": ".tar.gz", "none": ".tar"}


class _SplitSink(io.RawIOBase):
    """Write bytes into ``FILE.part001``, ``FILE.part002``, … of at most ``part_size`` bytes each."""

    def __init__(self, output: Path, part_size: int | None) -> None:
        super().__init__()
        self.output = output
        self.part_size = part_size
        self.temps: list[tuple[Path, Path]] = []  #: (temporary file, final name)
        self.digests: list[str] = []
        self._fh: BinaryIO | None = None
        self._left = 0
        self._hash = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def _next_part(self) -> None:
        self._close_part()
        final = self.output if self.part_size is None else self.output.with_name(
            f"{self.output.name}.part{len(self.temps) + 1:03d}"
        )
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        self._fh = os.fdopen(fd, "wb")
        self.temps.append((Path(tmp), final))
        self._left = self.part_size or -1
        self._hash = hashlib.sha256()

    def _close_part(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
            self.digests.append(self._hash.hexdigest())

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            if self._fh is None or self._left == 0:
                self._next_part()
            assert self._fh is not None
            take = len(view) if self._left < 0 else min(self._left, len(view))
            self._fh.write(view[:take])
            self._hash.update(view[:take])
            if self._left > 0:
                self._left -= take
            view = view[take:]
        return total

    def finish(self) -> None:
        if self._fh is None and not self.temps:
            self._next_part()  # an empty stream still makes one (empty) file
        self._close_part()

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for tmp, _ in self.temps:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


class BundleWriter:
    """A deterministic tar stream into one file or numbered parts; use as a context manager."""

    def __init__(self, output: Path, *, compression: str, mtime: int, split: int | None = None) -> None:
        """Open temporary output beside ``output``.

        :param output: final file name (the parts are ``output.partNNN`` with ``split``).
        :param compression: one of :data:`COMPRESSIONS`.
        :param mtime: the fixed timestamp of every member.
        :param split: maximum part size in bytes, or None for one file.
        """
        if compression not in COMPRESSIONS:
            raise UsageError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")
        if split is not None and split < 1 << 20:
            raise UsageError("--split must be at least 1M so the parts stay manageable")
        if not output.parent.is_dir():
            raise ToolError(f"cannot write {output}: {output.parent} is not a directory")
        self.output = output
        self.mtime = mtime
        self.sink = _SplitSink(output, split)
        self._buffered = io.BufferedWriter(self.sink, CHUNK)  # type: ignore[type-var]
        self._compressor: BinaryIO
        if compression == "zstd":
            cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=False, write_checksum=True, threads=0)
            self._compressor = cctx.stream_writer(self._buffered, closefd=False)
        elif compression == "xz":
            self._compressor = lzma.LZMAFile(self._buffered, mode="wb", preset=6)  # type: ignore[assignment]  # noqa: SIM115
        elif compression == "gzip":
            self._compressor = gzip.GzipFile(filename="", mode="wb", fileobj=self._buffered, mtime=0, compresslevel=6)  # type: ignore[assignment]
        else:
            self._compressor = self._buffered
        # tarfile's stream buffer re-slices its whole buffer per record: big buffers keep copies linear.
        self._tar = tarfile.open(fileobj=self._compressor, mode="w|", format=tarfile.GNU_FORMAT, bufsize=CHUNK)  # noqa: SIM115 (closed in commit/abort)
        self._tar.copybufsize = CHUNK  # type: ignore[attr-defined]
        self._closed = False

    def _info(self, name: str, size: int, executable: bool) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.size = size
        info.mtime = self.mtime
        info.mode = 0o755 if executable else 0o644
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.type = tarfile.REGTYPE
        return info

    def add_bytes(self, name: str, data: bytes, *, executable: bool = False) -> None:
        """Add a member with ``data`` as content."""
        self._tar.addfile(self._info(name, len(data), executable), io.BytesIO(data))

    def add_file(self, name: str, source: Path, *, size: int, sha256: str | None = None) -> str:
        """Stream ``source`` in as member ``name`` and return its sha256.

        :param size: the size the manifest names; a file of another size is an error.
        :param sha256: when given, the digest the manifest names; a mismatch aborts the build.
        :raises ChecksumMismatch: when the file changed since the manifest was made.
        """
        hasher = hashlib.sha256()
        reader = _HashingReader(source, hasher)
        try:
            if reader.size != size:
                raise ChecksumMismatch(str(source), f"{size} bytes", f"{reader.size} bytes")
            self._tar.addfile(self._info(name, size, False), reader)
        finally:
            reader.close()
        digest = hasher.hexdigest()
        if sha256 is not None and digest != sha256:
            raise ChecksumMismatch(str(source), sha256, digest)
        return digest

    def commit(self) -> list[Path]:
        """Finish the archive and give the output its final name(s); return them."""
        self._close_streams()
        self.sink.finish()
        final = []
        for tmp, name in self.sink.temps:
            os.chmod(tmp, 0o644)
            os.replace(tmp, name)
            final.append(name)
        return final

    def abort(self) -> None:
        """Remove every temporary output file."""
        with contextlib.suppress(Exception):
            self._close_streams()
        self.sink.discard()

    def _close_streams(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._tar.close()
        if self._compressor is not self._buffered:
            self._compressor.close()
        self._buffered.flush()

    def __enter__(self) -> BundleWriter:
        """Return self."""
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Abort on an exception; the caller commits explicitly on success."""
        if exc_type is not None:
            self.abort()


class _HashingReader:
    """A read-only file that hashes what is read from it (tarfile copies through ``read``)."""

    def __init__(self, path: Path, hasher: hashlib._Hash) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 (closed by close())
        self.size = os.fstat(self._fh.fileno()).st_size
        self._hasher = hasher

    def read(self, n: int = -1) -> bytes:
        block = self._fh.read(n)
        self._hasher.update(block)
        return block

    def close(self) -> None:
        self._fh.close()
