"""A real threaded HTTP/1.1 server on 127.0.0.1 over a directory, with switchable faults and a request log.

It behaves like a static site host (GitHub Pages) as far as a mirror cares: GET and HEAD, single
byte ranges (206 / 416), a strong ETag with If-None-Match (304), Last-Modified with
If-Modified-Since (304), If-Range, keep-alive. No directory listings; nothing outside the root.

Faults are per path (``"stable/deb/amd64/InRelease"``, leading ``/`` optional) and apply in the
order injected::

    server.inject("stable/deb/amd64/Packages.xz", Fault.drop_after(1000))
    server.inject("gpgkey", Fault.fail_first(2, status=503))

No fault waits on a clock: :meth:`Fault.hold` stalls a response until the test releases it, so a
test can act (send a signal, start another command) at a known point of a transfer.
"""

from __future__ import annotations

import contextlib
import email.utils
import mimetypes
import os
import re
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

from plumbing.errors import UnsafePathError
from plumbing.fsutil import safe_join


@dataclass
class Fault:
    """One misbehaviour of the server for one path. Build with the class methods."""

    kind: str  #: drop | status | hold | corrupt
    value: float = 0  #: drop: bytes before the drop; hold: bytes before the stall; corrupt: byte offset
    status: int = 0  #: status: the HTTP status to answer with
    times: int | None = None  #: status: how many requests fail (None = every one)
    hits: int = field(default=0, compare=False)  #: how many requests this fault has changed
    #: hold: set once a response has stalled (its headers and first bytes are sent)
    stalled: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    _released: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    @classmethod
    def drop_after(cls, nbytes: int) -> Fault:
        """Send the headers and ``nbytes`` of body, then close the connection mid-transfer."""
        return cls("drop", value=nbytes)

    @classmethod
    def fail_first(cls, times: int, *, status: int = 503) -> Fault:
        """Answer the first ``times`` requests with ``status`` (500, 503, ...), then serve normally."""
        return cls("status", status=status, times=times)

    @classmethod
    def error(cls, status: int) -> Fault:
        """Answer every request with ``status``."""
        return cls("status", status=status)

    @classmethod
    def not_found(cls) -> Fault:
        """Answer 404 as if the file did not exist."""
        return cls("status", status=404)

    @classmethod
    def hold(cls, nbytes: int = 0) -> Fault:
        """Send the headers and ``nbytes`` of body, then stall until :meth:`release` (or the server is cleared).

        Every response of the path stalls at that point until the release; after it they go through.
        """
        return cls("hold", value=nbytes)

    def wait_stalled(self, timeout: float = 60) -> None:
        """Block until a response of this ``hold`` fault has stalled (fail the test after ``timeout``)."""
        if not self.stalled.wait(timeout):
            raise AssertionError(f"no request reached the held path within {timeout} s")

    def release(self) -> None:
        """Let the stalled responses of this ``hold`` fault (and later ones) send the rest."""
        self._released.set()

    @classmethod
    def corrupt(cls, offset: int = 0) -> Fault:
        """Flip every bit of the byte at ``offset`` of the file (when the response includes it)."""
        return cls("corrupt", value=offset)


@dataclass(frozen=True)
class LogRecord:
    """One answered request."""

    method: str
    path: str  #: the request path without query, leading ``/`` kept
    status: int
    headers: dict[str, str]  #: request headers, lower-case names
    bytes_sent: int  #: body bytes sent (or being sent); the cut-off point when a drop fault hit

    @property
    def range(self) -> str | None:
        """The request's Range header, if any."""
        return self.headers.get("range")


_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
#: the longest a held response waits for its release
_HOLD_LIMIT = 120.0


def _norm(path: str) -> str:
    return "/" + unquote(urlsplit(path).path).lstrip("/")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the request log is :attr:`UpstreamServer.log`."""

    def do_GET(self) -> None:
        """Serve a file (or part of it)."""
        self._serve(body=True)

    def do_HEAD(self) -> None:
        """Serve headers only."""
        self._serve(body=False)

    def _record(self, status: int, sent: int) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.owner._append(LogRecord(self.command, _norm(self.path), status, headers, sent))

    def _simple(self, status: int, *, extra: dict[str, str] | None = None) -> None:
        payload = f"{status} {self.responses.get(status, ('',))[0]}\n".encode() if status >= 400 else b""
        send = payload if self.command != "HEAD" else b""
        # Log before answering: a client that has its answer must find the request in the log.
        self._record(status, len(send))
        self.send_response(status)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        if status != 304:
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if send:
            self.wfile.write(send)

    def _serve(self, *, body: bool) -> None:
        rel = _norm(self.path)
        faults = self.server.owner._faults_for(rel)
        for fault in faults:
            if fault.kind == "status" and self.server.owner._claim(fault):
                self._simple(fault.status)
                return
        try:
            target = safe_join(self.server.owner.root, rel.lstrip("/"))
        except UnsafePathError:
            self._simple(403)
            return
        if not target.is_file():
            self._simple(404)
            return
        stat = target.stat()
        size = stat.st_size
        etag = f'"{size:x}-{stat.st_mtime_ns:x}"'
        last_modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
        validators = {"ETag": etag, "Last-Modified": last_modified}
        if self._not_modified(etag, int(stat.st_mtime)):
            self._simple(304, extra=validators)
            return
        start, end = 0, size - 1
        status = 200
        wanted = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if wanted and (if_range is None or if_range in (etag, last_modified)):
            parsed = self._parse_range(wanted, size)
            if parsed is None:
                self._simple(416, extra={"Content-Range": f"bytes */{size}", **validators})
                return
            start, end = parsed
            status = 206
        length = max(0, end - start + 1)
        self.send_response(status)
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        for key, value in validators.items():
            self.send_header(key, value)
        if not body:
            self._record(status, 0)
            self.end_headers()
            return
        self._send_body(target, start, length, faults, status)

    def _send_body(self, target: Path, start: int, length: int, faults: list[Fault], status: int) -> None:
        """End the headers and send the body, applying corrupt and drop faults."""
        with open(target, "rb") as handle:
            handle.seek(start)
            data = bytearray(handle.read(length))
        for fault in faults:
            offset = int(fault.value) - start
            if fault.kind == "corrupt" and 0 <= offset < len(data):
                fault.hits += 1
                data[offset] ^= 0xFF
        hold = next((f for f in faults if f.kind == "hold"), None)
        if hold is not None and not hold._released.is_set():
            cut = min(int(hold.value), len(data))
            self._record(status, len(data))  # being sent: the request is in the log while it stalls
            with contextlib.suppress(OSError):
                self.end_headers()
                self.wfile.write(bytes(data[:cut]))
                self.wfile.flush()
            hold.hits += 1
            hold.stalled.set()
            # Bounded, so a test that forgets to release cannot hang the server's shutdown forever.
            hold._released.wait(_HOLD_LIMIT)
            with contextlib.suppress(OSError):
                self.wfile.write(bytes(data[cut:]))
            return
        drop = next((f for f in faults if f.kind == "drop"), None)
        if drop is not None and int(drop.value) < len(data):
            drop.hits += 1
            self._record(status, int(drop.value))
            with contextlib.suppress(OSError):
                self.end_headers()
                self.wfile.write(bytes(data[: int(drop.value)]))
                self.wfile.flush()
            self.close_connection = True
            # SHUT_RDWR makes the client see a short read at once instead of waiting on keep-alive.
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        # Log before the last byte leaves: a client that has the whole body finds it in the log.
        self._record(status, len(data))
        with contextlib.suppress(ConnectionError):
            self.end_headers()
            self.wfile.write(bytes(data))

    def _not_modified(self, etag: str, mtime: int) -> bool:
        inm = self.headers.get("If-None-Match")
        if inm is not None:  # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2)
            tags = [t.strip() for t in inm.split(",")]
            return "*" in tags or etag in tags or f"W/{etag}" in tags
        ims = self.headers.get("If-Modified-Since")
        if ims:
            with contextlib.suppress(TypeError, ValueError, IndexError):
                return mtime <= int(email.utils.parsedate_to_datetime(ims).timestamp())
        return False

    @staticmethod
    def _parse_range(value: str, size: int) -> tuple[int, int] | None:
        """One ``bytes=`` range -> (start, end) inclusive; None when unsatisfiable or malformed."""
        match = _RANGE.fullmatch(value.strip())
        if match is None or (not match.group(1) and not match.group(2)):
            return None
        first, last = match.groups()
        if not first:  # suffix range: the last N bytes
            n = int(last)
            return (max(0, size - n), size - 1) if n > 0 and size > 0 else None
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
        return (start, end) if start < size and start <= end else None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: UpstreamServer, address: tuple[str, int]) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Count every TCP connection accepted (keep-alive means fewer connections than requests)."""
        self.owner._count_connection()
        super().process_request(request, client_address)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up (a sync cancelling its other downloads) is normal, not a traceback.

        socketserver prints other errors to stderr, which in-process CLI tests capture as the
        command's own output.
        """
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class UpstreamServer:
    """Serve ``root`` on ``http://127.0.0.1:<port>`` in a background thread (port 0 = any free port)."""

    def __init__(self, root: Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """Bind at once (so ``url`` is known); call :meth:`start` or use ``with``."""
        self.root = Path(os.path.abspath(root))
        self._lock = threading.Lock()
        self._faults: dict[str, list[Fault]] = {}
        self._log: list[LogRecord] = []
        self._connections = 0
        self._httpd = _Server(self, (host, port))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL without trailing slash, e.g. ``http://127.0.0.1:40123``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """How many TCP connections the server has accepted since it started."""
        with self._lock:
            return self._connections

    def _count_connection(self) -> None:
        with self._lock:
            self._connections += 1

    def start(self) -> UpstreamServer:
        """Start serving in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, name="upstream-server", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._release_holds()  # a held response would keep its handler thread waiting
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the ``serve`` command)."""
        self._httpd.serve_forever()

    def __enter__(self) -> UpstreamServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def inject(self, path: str, fault: Fault) -> Fault:
        """Switch ``fault`` on for ``path`` (relative to the root); returns it so tests can read ``hits``."""
        with self._lock:
            self._faults.setdefault(_norm(path), []).append(fault)
        return fault

    def clear(self) -> None:
        """Remove every fault (releasing held responses) and empty the log."""
        self._release_holds()
        with self._lock:
            self._faults.clear()
            self._log.clear()

    reset = clear

    @property
    def log(self) -> list[LogRecord]:
        """A snapshot of the requests answered so far, oldest first."""
        with self._lock:
            return list(self._log)

    def requests_for(self, path: str) -> list[LogRecord]:
        """The logged requests of one path."""
        wanted = _norm(path)
        return [r for r in self.log if r.path == wanted]

    def url_for(self, path: str) -> str:
        """The full URL of ``path`` relative to the root."""
        return self.url + _norm(path)

    def _release_holds(self) -> None:
        with self._lock:
            for faults in self._faults.values():
                for fault in faults:
                    fault.release()

    def _faults_for(self, path: str) -> list[Fault]:
        with self._lock:
            return list(self._faults.get(path, ()))

    def _claim(self, fault: Fault) -> bool:
        """Count one hit of a status fault if it still applies (atomic across handler threads)."""
        with self._lock:
            if fault.times is not None and fault.hits >= fault.times:
                return False
            fault.hits += 1
            return True

    def _append(self, record: LogRecord) -> None:
        with self._lock:
            self._log.append(record)

    def iter_log(self) -> Iterator[LogRecord]:
        """Iterate over a snapshot of the log."""
        return iter(self.log)
