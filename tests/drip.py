"""A body that drips: what a stalling server or middlebox sends (issue 24.13's tests)."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler


def drip(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """Answer 200 with ``data`` one byte at a time, 10 ms apart (real time): every read gets a byte, none times out."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    for byte in data:
        try:
            handler.wfile.write(bytes([byte]))
        except OSError:  # the client gave up: what the tests want
            return
        threading.Event().wait(0.01)


@contextlib.contextmanager
def dripping_headers() -> Iterator[str]:
    """A loopback server (``127.0.0.1:PORT``) that sends status and header lines a byte every 10 ms, never ending them."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                for byte in itertools.cycle(b"HTTP/1.1 200 OK\r\nX-Drip: 1\r\n"):
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break
                    if stop.wait(0.01):
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)
