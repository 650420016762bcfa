"""Check that the first part of a split bundle holds the node check whole.

A node takes ``NODE-SHA256SUMS``, its signature, ``install.sh`` and the zipapp out of
``FILE.part001`` alone (``tar --occurrence`` stops once it has them, before the part's truncated
end), so they must all end inside that part. The builder writes them right after the manifest;
this reads the first part as a node's tar would and refuses a ``--split`` too small to hold them.
"""

from __future__ import annotations

import gzip
import lzma
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import zstandard

from installer.archive import detect_compression
from plumbing.errors import UsageError


@contextmanager
def _decompressed(part: Path) -> Iterator[BinaryIO]:
    with part.open("rb") as raw:
        kind = detect_compression(raw.read(8))
        raw.seek(0)
        if kind == "zstd":
            with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as stream:
                yield stream
        elif kind == "xz":
            with lzma.LZMAFile(raw) as stream:
                yield stream  # type: ignore[misc]
        elif kind == "gzip":
            with gzip.GzipFile(fileobj=raw) as stream:
                yield stream  # type: ignore[misc]
        else:
            yield raw


def head_size(sizes: Sequence[int]) -> int:
    """Bytes of tar stream that members of ``sizes`` take, in order from the start (headers and padding)."""
    return sum(tarfile.BLOCKSIZE + -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE for size in sizes)


def check_first_part(part: Path, names: Sequence[str], *, split: int, head_bytes: int) -> None:
    """Refuse (with the size to use instead) when ``part`` does not hold every member in ``names`` whole.

    :param part: the first part as written (any compression).
    :param names: the members a node takes out of it, which the builder wrote first after the manifest.
    :param split: the part size asked for, to name in the message.
    :param head_bytes: the uncompressed size of the archive up to the end of those members.
    :raises UsageError: naming a ``--split`` that fits them.
    """
    wanted = set(names)
    try:
        with _decompressed(part) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            for info in tar:
                if info.name in wanted:
                    handle = tar.extractfile(info)
                    if handle is None or len(handle.read()) != info.size:
                        break
                    wanted.discard(info.name)
                if not wanted:
                    return
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error, zstandard.ZstdError):
        pass  # the part ends inside them
    # Compression cannot grow the (mostly already compressed) node files by much: a MiB more covers it.
    fits = -(-head_bytes // (1 << 20)) + 1
    raise UsageError(
        f"--split {split} bytes is too small: the first part must hold {', '.join(names)} whole "
        f"({head_bytes} bytes of archive) so a node can check them before anything else; use --split {fits}M or more"
    )
