"""Write a deterministic, streaming, optionally compressed and split tar archive.

Determinism: members are added in the order the caller gives (the builder sorts them), every
header has mtime = SOURCE_DATE_EPOCH (or 0), uid/gid 0, empty user/group names, mode 0644 or
0755, GNU format (no pax time records). zstd runs at a fixed level in one thread without the
content-size field; gzip writes mtime 0 and no file name. So the same inputs give the same bytes.

Streaming: file members are read once, in 1 MiB chunks; each chunk goes to the compressor and,
on a worker thread, to sha256 (the caller passes the digest it put in the manifest; a mismatch
aborts). Compressed output is written by another thread, with writeback to disk started as it
goes. Queues between the threads are short, so memory stays flat whatever the archive's size,
and the work (all in C code that releases the GIL) spreads over the cores.

Nothing has its final name until :meth:`BundleWriter.commit`: output goes to temporary files
beside the target, removed by :meth:`BundleWriter.abort` (or on an exception in the ``with``).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import io
import lzma
import os
import queue
import tarfile
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Callable, Final

import zstandard

from mirror.errors import PackageChangedError
from mirror.model import COMPRESSIONS
from plumbing.errors import ToolError, UsageError

CHUNK: Final = 1 << 20
WRITEBACK: Final = 8 << 20  #: start writing output back to disk every this many bytes
ZSTD_LEVEL: Final = 3
ZSTD_THREADS: Final = 0
SUFFIX: Final = {"zstd": ".tar.zst", "xz": ".tar.xz", "gzip": ".tar.gz", "none": ".tar"}


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range, looked up on first use (ctypes is not imported by merely loading this module)."""
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux/glibc: the final fsync does all the work
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE_WRITE: Final = 2


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``length`` bytes at ``offset`` to disk, without waiting.

    The commit still fsyncs every part; starting writeback as the archive grows means that
    fsync finds little left to do (a 200 MB bundle: 60 ms -> 5 ms) instead of writing it all at the end.
    """
    function = _sync_file_range()
    if function is not None:
        function(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # advisory: errors surface at fsync


class _SplitSink(io.RawIOBase):
    """Write bytes into ``FILE.part001``, ``FILE.part002``, … of at most ``part_size`` bytes each."""

    def __init__(self, output: Path, part_size: int | None) -> None:
        super().__init__()
        self.output = output
        self.part_size = part_size
        self.temps: list[tuple[Path, Path]] = []  #: (temporary file, final name)
        self._fh: BinaryIO | None = None
        self._left = 0
        self._written = 0  # bytes in the current part
        self._flushed = 0  # of which the kernel was asked to start writing back

    def writable(self) -> bool:
        return True

    def _next_part(self) -> None:
        self._close_part()
        final = (
            self.output
            if self.part_size is None
            else self.output.with_name(f"{self.output.name}.part{len(self.temps) + 1:03d}")
        )
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        self._fh = os.fdopen(fd, "wb")
        self.temps.append((Path(tmp), final))
        self._left = self.part_size or -1
        self._written = self._flushed = 0

    def _close_part(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            if self._fh is None or self._left == 0:
                self._next_part()
            assert self._fh is not None
            take = len(view) if self._left < 0 else min(self._left, len(view))
            self._fh.write(view[:take])
            self._written += take
            if self._left > 0:
                self._left -= take
            view = view[take:]
        if self._fh is not None and self._written - self._flushed >= WRITEBACK:
            self._fh.flush()
            _start_writeback(self._fh.fileno(), self._flushed, self._written - self._flushed)
            self._flushed = self._written
        return total

    def finish(self) -> None:
        if self._fh is None and not self.temps:
            self._next_part()  # an empty stream still makes one (empty) file
        self._close_part()

    def add_file(self, final: Path, data: bytes) -> None:
        """Write ``data`` to a temporary file that :meth:`BundleWriter.commit` renames to ``final``."""
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        self.temps.append((Path(tmp), final))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for tmp, _ in self.temps:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


class _Worker:
    """Apply ``consume`` to each queued chunk on a thread of its own.

    The bundle's work per chunk — read, sha256, zstd, write — runs in C that releases the GIL
    (hashlib on buffers over 2 KiB, zstandard, file I/O), so spreading it over threads uses
    both cores. At most ``depth`` chunks wait in the queue, so memory stays flat. An error in
    the thread is re-raised by the next :meth:`put` or by :meth:`close`.
    """

    def __init__(self, consume: Callable[[bytes], object], name: str, depth: int = 8) -> None:
        self._consume = consume
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while (data := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._consume(data)
                except BaseException as exc:  # handed to the producer thread
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, data: bytes) -> None:
        """Queue ``data`` (which must not change afterwards); block while the queue is full."""
        self._raise()
        self._queue.put(data)

    def close(self) -> None:
        """Wait until every queued chunk is consumed, then re-raise the thread's error, if any."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()


class _BackgroundSink(io.RawIOBase):
    """Hand writes to a thread that feeds ``sink``, so disk writes overlap reading, hashing and compressing."""

    def __init__(self, sink: _SplitSink) -> None:
        super().__init__()
        self._worker = _Worker(sink.write, "bundle-writer")

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        # A view (BufferedWriter's buffer) is reused after we return, so it is copied; the bytes
        # zstandard hands over are immutable and queued as they are.
        chunk = data if isinstance(data, bytes) else bytes(data)
        self._worker.put(chunk)
        return len(chunk)

    def close(self) -> None:
        """Wait for every queued write; re-raise a write error."""
        super().close()
        self._worker.close()


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
        self._background = _BackgroundSink(self.sink)
        self._buffered = io.BufferedWriter(self._background, CHUNK)  # type: ignore[type-var]
        self._compressor: BinaryIO
        if compression == "zstd":
            # Single-threaded on purpose: worker threads measured slower here (2 cores shared with
            # the hashing) and buffer whole jobs, raising peak RSS from ~55 MB to ~150 MB.
            cctx = zstandard.ZstdCompressor(
                level=ZSTD_LEVEL, write_content_size=False, write_checksum=True, threads=ZSTD_THREADS
            )
            # Straight into the writer thread, in CHUNK-sized pieces: no buffer copy on the way.
            self._compressor = cctx.stream_writer(self._background, write_size=CHUNK, closefd=False)  # type: ignore[arg-type]
        elif compression == "xz":
            self._compressor = lzma.LZMAFile(self._buffered, mode="wb", preset=6)  # type: ignore[assignment]  # noqa: SIM115
        elif compression == "gzip":
            self._compressor = gzip.GzipFile(
                filename="", mode="wb", fileobj=self._buffered, mtime=0, compresslevel=6
            )  # type: ignore[assignment]
        else:
            self._compressor = self._buffered
        self._offset = 0  # uncompressed bytes written, for tar block padding
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

    # The tar framing is written here rather than through tarfile's stream mode: tarfile copies
    # every chunk through a re-sliced bytes buffer, which cost a third of the build time. Headers
    # still come from TarInfo.tobuf (GNU format), and the end matches tarfile's: two zero blocks,
    # padded to a 10240-byte record.
    def _write(self, data: bytes) -> None:
        self._compressor.write(data)
        self._offset += len(data)

    def _pad(self) -> None:
        if self._offset % tarfile.BLOCKSIZE:
            self._write(tarfile.NUL * (tarfile.BLOCKSIZE - self._offset % tarfile.BLOCKSIZE))

    def add_bytes(self, name: str, data: bytes, *, executable: bool = False) -> None:
        """Add a member with ``data`` as content."""
        self._write(self._info(name, len(data), executable).tobuf(tarfile.GNU_FORMAT, "utf-8", "strict"))
        self._write(data)
        self._pad()

    def add_file(self, name: str, source: Path, *, size: int, sha256: str | None = None) -> str:
        """Stream ``source`` in as member ``name`` and return its sha256.

        :param size: the size the manifest names; a file of another size is an error.
        :param sha256: when given, the digest the manifest names; a mismatch aborts the build.
        :raises PackageChangedError: when the file changed since the manifest was made.
        """
        hasher = hashlib.sha256()
        hashing = _Worker(hasher.update, "bundle-hash", depth=4)
        try:
            self._copy(name, source, size, hashing)
        finally:
            hashing.close()
        digest = hasher.hexdigest()
        if sha256 is not None and digest != sha256:
            raise PackageChangedError(source, f"sha256 {sha256[:16]}…", f"{digest[:16]}…")
        return digest

    def _copy(self, name: str, source: Path, size: int, hashing: _Worker) -> None:
        with open(source, "rb") as fh:
            actual = os.fstat(fh.fileno()).st_size
            if actual != size:
                raise PackageChangedError(source, f"{size} bytes", f"{actual} bytes")
            self._write(self._info(name, size, False).tobuf(tarfile.GNU_FORMAT, "utf-8", "strict"))
            copied = 0
            while block := fh.read(CHUNK):
                hashing.put(block)  # the very bytes compressed below: one read serves both
                self._write(block)
                copied += len(block)
            if copied != size:
                raise PackageChangedError(source, f"{size} bytes", f"{copied} bytes while read")
            self._pad()

    def commit(
        self,
        sidecars: Callable[[list[tuple[Path, Path]]], dict[str, bytes]] | None = None,
        check_first: Callable[[Path], None] | None = None,
    ) -> list[Path]:
        """Finish the archive and give the output its final name(s); return them.

        :param sidecars: given the (temporary file, final name) of every part, returns further
            files to write beside the output (``{name: bytes}``: the split checksum list and its
            signature). They are written before anything gets its final name, so a failure (a
            full disk) leaves no part without its list.
        :param check_first: called with the finished first file (still under its temporary name)
            before anything is renamed; an exception from it leaves no output (the ``with`` aborts).
        """
        self._close_streams()
        self.sink.finish()
        if check_first is not None:
            check_first(self.sink.temps[0][0])
        if sidecars is not None:
            for sidecar, data in sidecars(list(self.sink.temps)).items():
                self.sink.add_file(self.output.with_name(sidecar), data)
        final: list[Path] = []
        for tmp, target in self.sink.temps:
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
            final.append(target)
        return final

    def abort(self) -> None:
        """Remove every temporary output file."""
        with contextlib.suppress(Exception):
            self._close_streams()
        with contextlib.suppress(Exception):
            self._background.close()  # stop the writer thread before its files go
        self.sink.discard()

    def _close_streams(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._write(tarfile.NUL * (2 * tarfile.BLOCKSIZE))
        if self._offset % tarfile.RECORDSIZE:
            self._write(tarfile.NUL * (tarfile.RECORDSIZE - self._offset % tarfile.RECORDSIZE))
        if self._compressor is not self._buffered:
            self._compressor.close()
        self._buffered.flush()
        self._background.close()

    def __enter__(self) -> BundleWriter:
        """Return self."""
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Abort on an exception; the caller commits explicitly on success."""
        if exc_type is not None:
            self.abort()
