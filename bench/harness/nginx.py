"""nginx on 127.0.0.1 serving a local upstream: one throttled and one unthrottled server block.

Both blocks serve the same ``root`` and write one access log with the request, status, bytes
sent and Range header of every request, so a benchmark can count what a tool asked for.
Truncating the log between runs is safe: nginx opens it with O_APPEND and does not buffer it.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

RATE = "20m"  # nginx limit_rate: 20 MiB/s per connection


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class LogLine:
    """One request nginx answered."""

    path: str
    status: int
    bytes_sent: int  #: body bytes (``$body_bytes_sent``)
    range: str  #: the Range header, ``-`` when absent


@dataclass
class Nginx:
    """A running nginx; use :func:`start_nginx`."""

    proc: subprocess.Popen[bytes]
    throttled_url: str
    fast_url: str
    access_log: Path

    def clear_log(self) -> None:
        """Forget what was logged so far."""
        self.access_log.write_bytes(b"")

    def read_log(self) -> list[LogLine]:
        """The requests logged since the last :meth:`clear_log`."""
        lines = []
        for raw in self.access_log.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = raw.split(" ", 3)
            if len(parts) == 4:
                lines.append(LogLine(parts[0], int(parts[1]), int(parts[2]), parts[3].strip('"')))
        return lines

    def stop(self) -> None:
        """Stop nginx and wait for it."""
        self.proc.terminate()
        self.proc.wait(timeout=10)


def start_nginx(root: Path, work: Path, *, rate: str = RATE) -> Nginx:
    """Serve ``root`` (may be a symlink, swapped between runs) on two free ports; files go to ``work``."""
    throttled, fast = free_port(), free_port()
    conf = work / "nginx.conf"
    log = work / "access.log"
    conf.write_text(
        f"""
worker_processes 2;
user root;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format bench '$uri $status $body_bytes_sent "$http_range"';
    access_log {log} bench;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    types {{ }}
    default_type application/octet-stream;
    server {{ listen 127.0.0.1:{throttled}; root {root}; limit_rate {rate}; }}
    server {{ listen 127.0.0.1:{fast}; root {root}; }}
}}
"""
    )
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(work)], stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", fast), timeout=0.1).close()
            socket.create_connection(("127.0.0.1", throttled), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        raise SystemExit(f"nginx did not start: {proc.stderr.read() if proc.stderr else ''!r}")
    return Nginx(proc, f"http://127.0.0.1:{throttled}", f"http://127.0.0.1:{fast}", log)
