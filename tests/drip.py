"""A body that drips: what a stalling server or middlebox sends (issue 24.13's tests)."""

from __future__ import annotations

import threading
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
