"""The bookkeeping of transfers: what to fetch, what was fetched, and what arrived so far.

:class:`DownloadRequest` names a file and its signed size and digest; :class:`TransferStats`
counts what a :class:`~mirror.sync.http.Downloader` did. So that the next attempt resumes a
dropped transfer with a ``Range`` request, :class:`PartialFile` is a package's ``.part`` file on
disk (it survives the process, and a later sync re-hashes it before resuming) and
:class:`PartialBody` a metadata file in memory (it lives for the retries of one request). Both
know how far they got and take a ``206`` answer only when it starts exactly there.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import requests

CHUNK: Final = 1024 * 1024
_CONTENT_RANGE: Final = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class DownloadRequest:
    """One file to fetch: where from, where to, and what the signed metadata says it must be."""

    url: str
    dest: Path
    size: int
    sha256: str | None = None
    sha512: str | None = None


@dataclass
class TransferStats:
    """Counters a sync reports and tests assert on; updated under a lock from worker threads."""

    requests: int = 0
    not_modified: int = 0
    metadata_bytes: int = 0
    package_bytes: int = 0
    resumed: int = 0
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add ``counts`` to the named counters."""
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


def range_start(response: requests.Response) -> int | None:
    """Where the body of a ``206`` answer starts, from its ``Content-Range``."""
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    return int(match.group(1)) if match else None


class _BinaryWriter(Protocol):
    def write(self, data: bytes, /) -> int: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class PartialFile:
    """The ``.part`` file of one download, its length and the running digest of its bytes."""

    def __init__(self, path: Path, algo: str) -> None:
        """Open (and, when an interrupted attempt left one, re-hash) ``path``."""
        self.path = path
        self.algo = algo
        self.hasher = hashlib.new(algo)
        self.offset = 0
        self.resumed_from = 0
        self._handle: _BinaryWriter | None = None
        if path.exists():
            # A part file left by an interrupted attempt: hash what it holds so we can resume.
            with open(path, "rb") as fh:
                while block := fh.read(CHUNK):
                    self.hasher.update(block)
                    self.offset += len(block)
            self.resumed_from = self.offset

    def open(self) -> _BinaryWriter:
        """The part file, opened for appending (once)."""
        if self._handle is None:
            self._handle = open(self.path, "ab")  # noqa: SIM115 - kept open across chunks, closed in close()
        return self._handle

    def append(self, chunk: bytes) -> None:
        """Add ``chunk`` to the file and the digest."""
        self.open().write(chunk)
        self.hasher.update(chunk)
        self.offset += len(chunk)

    def reset(self) -> None:
        """Start over: remove the file, forget the digest."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.hasher = hashlib.new(self.algo)
        self.offset = 0
        self.resumed_from = 0

    def close(self) -> None:
        """Close the file (its bytes stay)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.close()


class PartialBody:
    """A metadata body being received in memory, and the validator that makes resuming it safe.

    A resumed request carries ``If-Range`` with the first answer's strong ETag (else its
    Last-Modified): a server whose file changed meanwhile answers ``200`` with all of the new
    file instead of a range of it, so two versions are never spliced. Without a validator the
    body is fetched again from the start.
    """

    def __init__(self) -> None:
        """Nothing received yet."""
        self.data = bytearray()
        self.etag: str | None = None
        self.last_modified: str | None = None

    @property
    def offset(self) -> int:
        """How many bytes arrived."""
        return len(self.data)

    def resume_headers(self) -> dict[str, str]:
        """``Range`` and ``If-Range`` for the next attempt; empty when it must start over."""
        validator = self.etag if self.etag and not self.etag.startswith("W/") else self.last_modified
        if not self.data or not validator:
            self.data.clear()
            return {}
        return {"Range": f"bytes={len(self.data)}-", "If-Range": validator}

    def start(self, response: requests.Response) -> None:
        """A full (``200``) answer begins: drop what an earlier attempt had, keep its validators."""
        self.data.clear()
        self.etag = response.headers.get("ETag")
        self.last_modified = response.headers.get("Last-Modified")
