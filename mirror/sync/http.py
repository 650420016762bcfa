"""The only module that talks HTTP (and the only one importing ``requests``).

:class:`Downloader` owns one pooled :class:`requests.Session` and offers two operations:

* :meth:`Downloader.get` - small metadata files into memory, with an optional conditional-GET
  cache (ETag / If-Modified-Since), so an unchanged upstream answers ``304`` and the stored
  bytes are reused. Callers re-verify those bytes exactly as if they were fresh. A dropped
  transfer resumes with ``Range`` and ``If-Range`` (:class:`~mirror.sync.partial.PartialBody`).
* :meth:`Downloader.download` - package files streamed to disk while hashing. The bytes go to a
  ``.part`` file beside the target; an interrupted transfer resumes with a ``Range`` request;
  the target gets its final name only when size and checksum match.

Connection errors and 5xx answers are retried with bounded exponential backoff (the wait is
:func:`plumbing.clock.backoff` or an injected ``sleep``, so tests do not wait); a host name that
does not resolve is not retried.
Everything else becomes a one-sentence :class:`~mirror.errors.FetchError` (worded by
:mod:`mirror.sync.netfail`) or :class:`~plumbing.errors.ChecksumMismatch`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, Protocol, TypeVar

import requests
import urllib3

from mirror.errors import FetchError
from mirror.sync.deadline import DeadlineAdapter
from mirror.sync.netfail import CONNECTION_HINT, describe
from mirror.sync.transaction import CachedResponse
from mirror.sync.transfer import CHUNK, DownloadRequest, PartialBody, PartialFile, TransferStats, range_start
from plumbing import clock, output, rate
from plumbing.errors import ChecksumMismatch, NoSpaceError, ToolError

# DownloadRequest is part of this module's interface (sync.core and tests import it from here).
__all__ = ["CachingFetcher", "DownloadRequest", "Downloader", "ResponseCache", "TransferStats"]

log = logging.getLogger(__name__)

USER_AGENT: Final = "gpu-airgap"
#: Metadata is read into memory: a server that sends more than this is refused (NVIDIA's largest index is a few MB).
MAX_METADATA: Final = 256 * 1024 * 1024

ProgressCallback = Callable[[int], None]
_T = TypeVar("_T")


class ResponseCache(Protocol):
    """Where conditional-GET validators and bodies live (the mirror store implements it)."""

    def lookup(self, url: str) -> CachedResponse | None:
        """Return what was stored for ``url``, or None."""

    def remember(self, url: str, response: CachedResponse) -> None:
        """Record a fresh (or revalidated) response for ``url``."""


class _Retryable(Exception):
    """Internal: this attempt failed in a way worth another try."""

    def __init__(self, status: int | None, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class Downloader:
    """HTTP client of the mirror: pooled session, conditional GETs, verified resumable downloads.

    :param jobs: the most files :meth:`download_many` fetches at once (the pool holds as many connections).
    :param retries: extra attempts after the first for connection errors and 5xx answers.
    :param backoff: first wait in seconds; doubled after every failed attempt, capped at ``max_backoff``.
    :param timeout: connect and read timeout in seconds.
    :param sleep: how to wait between attempts (default :func:`plumbing.clock.backoff`, looked up at each wait).
    :param notify: told each retry in one line (default: a warning on stderr, so it shows without --debug).
    :param min_rate: bytes/s a body must keep up over :data:`plumbing.rate.WINDOW` (0: no floor); ``now`` is its clock.
    :param header_deadline: seconds an answer's status line and headers may take in all (:mod:`mirror.sync.deadline`).
    """

    def __init__(
        self,
        *,
        jobs: int = 4,
        retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        timeout: float = 30.0,
        sleep: Callable[[float], None] | None = None,
        notify: Callable[[str], None] = output.warn,
        min_rate: float = rate.DEFAULT_MIN_RATE,
        now: Callable[[], float] = time.monotonic,
        header_deadline: float = 60.0,
    ) -> None:
        if jobs < 1:
            raise ToolError("--jobs must be at least 1")
        self.jobs = jobs
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.sleep = sleep
        self.notify = notify
        self.min_rate, self.now = min_rate, now  #: the floor under every body (plumbing.rate)
        self.stats = TransferStats()
        self.session = requests.Session()
        adapter = DeadlineAdapter(
            header_deadline, pool_connections=max(jobs, 4), pool_maxsize=max(jobs, 4), max_retries=0
        )
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        # identity: sizes, checksums and Range offsets all refer to the bytes as published.
        self.session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()

    def __enter__(self) -> Downloader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- metadata --------------------------------------------------------------------------------

    def get(self, url: str, *, cache: ResponseCache | None = None) -> bytes:
        """Fetch ``url`` into memory (the ``Fetcher`` protocol), revalidating a cached copy if any.

        :param url: what to fetch.
        :param cache: where validators and bodies of earlier answers live; ``304`` reuses them.
        :raises FetchError: on an HTTP error status or after the last failed retry.
        """
        cached = cache.lookup(url) if cache is not None else None
        conditional: dict[str, str] = {}
        if cached is not None and cached.etag:
            conditional["If-None-Match"] = cached.etag
        if cached is not None and cached.last_modified:
            conditional["If-Modified-Since"] = cached.last_modified
        body = PartialBody()

        def attempt() -> bytes:
            resume = body.resume_headers()
            response = self._request(url, resume or conditional, stream=True)
            with response:
                if response.status_code == 304 and cached is not None and not resume:
                    self.stats.add(not_modified=1)
                    return cached.body
                if resume and response.status_code == 206 and range_start(response) == body.offset:
                    self.stats.add(resumed=1)
                elif resume and response.status_code in (206, 416):
                    body.data.clear()  # a range we did not ask for, or the file shrank: start over
                    raise _Retryable(None, "the server refused to resume the transfer")
                else:
                    self._raise_for_status(url, response)
                    body.start(response)
                self._stream(
                    url, response, body.data.extend, limit=MAX_METADATA - body.offset, stat="metadata_bytes"
                )
            if body.offset > MAX_METADATA:
                raise FetchError(url, None, f"the server sent more than {MAX_METADATA} bytes of metadata")
            data = bytes(body.data)
            if cache is not None:
                cache.remember(url, CachedResponse(data, body.etag, body.last_modified))
            return data

        return self._with_retries(url, attempt)

    def fetcher(self, cache: ResponseCache | None = None) -> CachingFetcher:
        """A ``Fetcher`` (``get(url) -> bytes``) that revalidates against ``cache``."""
        return CachingFetcher(self, cache)

    # -- packages --------------------------------------------------------------------------------

    def download(
        self,
        url: str,
        dest: Path,
        *,
        size: int,
        sha256: str | None = None,
        sha512: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> int:
        """Stream ``url`` to ``dest``, verifying ``size`` and the checksum before ``dest`` exists.

        The bytes land in ``.<name>.part`` beside ``dest``; that file survives failed attempts so
        the next one resumes with ``Range: bytes=N-``. A server that ignores the range (200, or a
        206 for another range) makes us start over.

        :returns: the number of bytes transferred over the network.
        :raises FetchError: on an HTTP error status or after the last failed retry.
        :raises ChecksumMismatch: when the complete file has the wrong size or digest.
        """
        if sha512 is None and sha256 is None:
            raise ToolError(f"refusing to download {url} without a checksum from signed metadata")
        algo, expected = ("sha512", sha512) if sha512 else ("sha256", sha256 or "")
        part = dest.with_name(f".{dest.name}.part")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if NoSpaceError.matches(exc):
                raise NoSpaceError(dest.parent) from exc
            raise
        state = PartialFile(part, algo)
        transferred = 0
        restarted_after_mismatch = False
        try:
            while True:

                def attempt() -> int:
                    return self._fetch_into(url, state, size, on_progress)

                transferred += self._with_retries(url, attempt)
                actual = state.hasher.hexdigest()
                if state.offset == size and actual == expected.lower():
                    break
                # A resumed file may mix two versions of a file re-published mid-transfer:
                # one clean full retry before blaming the server.
                if state.resumed_from and not restarted_after_mismatch:
                    restarted_after_mismatch = True
                    state.reset()
                    continue
                what = f"{url} ({state.offset} bytes, expected {size})" if state.offset != size else url
                raise ChecksumMismatch(what, expected, actual)
            state.close()
            os.replace(part, dest)
        except (_Cancelled, KeyboardInterrupt):
            # Stopped, not failed (Ctrl-C, or another download failed): the bytes so far are good,
            # so the part file stays for the next sync to resume (a failed sync removes staging/).
            state.close()
            raise
        except OSError as exc:
            if not NoSpaceError.matches(exc):
                state.reset()
                raise
            # A full disk: what reached the part file is a good prefix (the next run re-hashes it
            # from disk before resuming), so it stays, like after Ctrl-C.
            with contextlib.suppress(OSError):
                state.close()
            raise NoSpaceError(part) from exc
        except BaseException:
            # A failure removes the part file: no suspect bytes outlive this call.
            state.reset()
            raise
        return transferred

    def download_many(
        self, items: Sequence[DownloadRequest], on_progress: ProgressCallback | None = None
    ) -> int:
        """Download ``items`` with at most ``jobs`` in flight; the first failure cancels the rest.

        :returns: the total number of bytes transferred.
        :raises FetchError | ChecksumMismatch: the first error, after in-flight downloads stop.
        """
        if not items:
            return 0
        cancel = threading.Event()

        def progress(nbytes: int) -> None:
            if cancel.is_set():
                raise _Cancelled()
            if on_progress is not None:
                on_progress(nbytes)

        def one(item: DownloadRequest) -> int:
            if cancel.is_set():
                return 0
            return self.download(
                item.url,
                item.dest,
                size=item.size,
                sha256=item.sha256,
                sha512=item.sha512,
                on_progress=progress,
            )

        total = 0
        first_error: BaseException | None = None
        with ThreadPoolExecutor(
            max_workers=min(self.jobs, len(items)), thread_name_prefix="download"
        ) as pool:
            futures = [pool.submit(one, item) for item in items]
            for future in futures:
                try:
                    total += future.result()
                except _Cancelled:
                    continue
                except BaseException as exc:
                    if first_error is None:
                        first_error = exc
                        cancel.set()
        if first_error is not None:
            raise first_error
        return total

    # -- internals -------------------------------------------------------------------------------

    def _fetch_into(
        self, url: str, state: PartialFile, size: int, on_progress: ProgressCallback | None
    ) -> int:
        headers: dict[str, str] = {}
        if 0 < state.offset < size:
            headers["Range"] = f"bytes={state.offset}-"
        elif state.offset >= size:
            return 0  # the part file already holds everything; the caller checks the digest
        response = self._request(url, headers, stream=True)
        with response:
            if "Range" in headers:
                if response.status_code == 206 and range_start(response) == state.offset:
                    state.resumed_from = state.offset
                    self.stats.add(resumed=1)
                elif response.status_code in (200, 206, 416):
                    log.debug("%s: server ignored our range, starting over", url)
                    state.reset()
                    if response.status_code != 200:
                        raise _Retryable(None, "the server refused to resume the transfer")
            self._raise_for_status(url, response)
            # Stop reading past the signed size: the digest check then fails without the rest.
            got = self._stream(
                url,
                response,
                state.append,
                limit=size - state.offset,
                stat="package_bytes",
                on_progress=on_progress,
            )
        # A response that ended cleanly but short is a wrong file, not a network hiccup (a dropped
        # connection raises above): the caller's size check reports it without pointless retries.
        return got

    def _stream(
        self,
        url: str,
        response: requests.Response,
        write: Callable[[bytes], object],
        *,
        limit: int,
        stat: str,
        on_progress: ProgressCallback | None = None,
    ) -> int:
        """Pass the body of ``response`` to ``write`` as it arrives, stopping once more than ``limit`` bytes came.

        :raises _Retryable: when the connection drops; what arrived before has been written.
        """
        got = 0
        raw = response.raw
        floor = rate.RateFloor(url, self.min_rate, clock=self.now)
        try:
            while got <= limit:
                try:
                    # read1: whatever has arrived (up to 1 MiB), so a dropped connection loses nothing
                    # that reached us and the next attempt resumes exactly where this one stopped.
                    chunk = raw.read1(CHUNK, decode_content=False)
                except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                    raise _Retryable(None, describe(exc, url).reason) from exc
                if not chunk:
                    break
                write(chunk)  # outside the try above: a full disk is not a network error
                got += len(chunk)
                floor.arrived(len(chunk))
                if on_progress is not None:
                    on_progress(len(chunk))
        finally:
            self.stats.add(**{stat: got})
        return got

    def _request(self, url: str, headers: dict[str, str], *, stream: bool = False) -> requests.Response:
        self.stats.add(requests=1)
        try:
            return self.session.get(url, headers=headers, stream=stream, timeout=self.timeout)
        except requests.exceptions.InvalidURL as exc:
            raise FetchError(url, None, "it is not a valid URL") from exc
        except (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema) as exc:
            raise FetchError(url, None, "the URL needs http:// or https://") from exc
        except requests.RequestException as exc:
            failure = describe(exc, url)
            if not failure.retry:
                raise FetchError(url, None, failure.reason, hint=CONNECTION_HINT) from exc
            raise _Retryable(None, failure.reason) from exc

    @staticmethod
    def _raise_for_status(url: str, response: requests.Response) -> None:
        status = response.status_code
        if status >= 500 or status == 429:
            raise _Retryable(status, response.reason or "")
        if status >= 400 or status == 304:
            raise FetchError(url, status, response.reason or "")

    def _with_retries(self, url: str, attempt: Callable[[], _T]) -> _T:
        for number in range(self.retries + 1):
            try:
                return attempt()
            except _Retryable as exc:
                if number == self.retries:
                    hint = CONNECTION_HINT if exc.status is None else ""
                    raise FetchError(url, exc.status, exc.detail, attempts=number + 1, hint=hint) from exc
                delay = min(self.max_backoff, self.backoff * (2**number))
                self.notify(
                    f"{url}: {exc.detail or exc.status}; retry {number + 1} of {self.retries} in {delay:.1f} s"
                )
                self.stats.add(retries=1)
                (self.sleep or clock.backoff)(delay)
        raise AssertionError("unreachable")  # pragma: no cover


class CachingFetcher:
    """``Fetcher`` view of a :class:`Downloader` bound to one conditional-GET cache."""

    def __init__(self, downloader: Downloader, cache: ResponseCache | None) -> None:
        self.downloader = downloader
        self.cache = cache

    def get(self, url: str) -> bytes:
        """Fetch ``url`` (see :meth:`Downloader.get`)."""
        return self.downloader.get(url, cache=self.cache)


class _Cancelled(Exception):
    """Internal: another download failed, so this one stops."""
