"""Issue 24.13: a download that drips (1 byte / 5 s) is abandoned instead of running for weeks.

:class:`plumbing.rate.RateFloor` is the pure rule; the mirror's :class:`~mirror.sync.http.Downloader`
is driven against a loopback server that really drips, with an injected clock that moves 5 s per look,
so the test takes a fraction of a second. (The registry client's test is in test_oci_units.py.)
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, List

import pytest

from mirror.errors import FetchError
from mirror.sync.http import Downloader
from plumbing.errors import ExitCode
from plumbing.rate import RateFloor, TransferTooSlow
from tests.drip import drip, dripping_headers

DATA = b"p" * 400


def _clock(step: float) -> Callable[[], float]:
    ticks = iter(range(0, 1_000_000))
    return lambda: next(ticks) * step


def test_the_floor_judges_each_whole_window_and_zero_turns_it_off() -> None:
    times: List[float] = [0.0, 30.0, 59.0, 60.0]
    floor = RateFloor("x", 100, clock=lambda: times.pop(0))
    floor.arrived(3000)  # 30 s: no verdict yet
    floor.arrived(3000)  # 59 s
    floor.arrived(0)  # 60 s: 6000 bytes / 60 s = 100 bytes/s, exactly the floor
    slow = RateFloor("the file", 100, clock=_clock(61.0))
    with pytest.raises(TransferTooSlow, match=r"^the file arrived at 98\.4 bytes/s over the last 61 s"):
        slow.arrived(6000)
    RateFloor("x", 0, clock=_clock(1000.0)).arrived(1)  # no floor


@pytest.fixture()
def dripping() -> Iterator[str]:
    """A loopback server that sends :data:`DATA` one byte at a time, 10 ms apart."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            drip(self, DATA)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/pool/p.deb"
    server.shutdown()
    server.server_close()


def test_a_package_dripping_below_the_floor_is_abandoned_and_leaves_no_part_file(
    dripping: str, tmp_path: Path
) -> None:
    dest = tmp_path / "pool" / "p.deb"
    downloader = Downloader(sleep=lambda _: None, notify=lambda _: None, now=_clock(5.0))
    with downloader, pytest.raises(TransferTooSlow, match="below the --min-rate of 1024 bytes/s") as info:
        downloader.download(dripping, dest, size=len(DATA), sha256=hashlib.sha256(DATA).hexdigest())
    assert info.value.exit_code == ExitCode.NETWORK and dripping in str(info.value)
    assert list(dest.parent.iterdir()) == []  # neither the file nor its .part
    assert downloader.stats.requests == 1  # a stall is not retried: it would stall again


def test_metadata_dripping_below_the_floor_is_abandoned(dripping: str) -> None:
    downloader = Downloader(sleep=lambda _: None, notify=lambda _: None, now=_clock(5.0))
    with downloader, pytest.raises(TransferTooSlow, match=r"arrived at 0\.2 bytes/s"):
        downloader.get(dripping)


def test_with_no_floor_the_same_drip_completes(dripping: str, tmp_path: Path) -> None:
    dest = tmp_path / "p.deb"
    with Downloader(notify=lambda _: None, min_rate=0, now=_clock(5.0)) as downloader:
        downloader.download(dripping, dest, size=len(DATA), sha256=hashlib.sha256(DATA).hexdigest())
    assert dest.read_bytes() == DATA


def test_headers_dripping_past_their_deadline_fail_the_download_after_its_retries() -> None:
    downloader = Downloader(retries=1, sleep=lambda _: None, notify=lambda _: None, header_deadline=0.3)
    with dripping_headers() as host, downloader, pytest.raises(FetchError) as info:
        downloader.get(f"http://{host}/dists/stable/InRelease")
    assert info.value.exit_code == ExitCode.NETWORK
    assert "stopped sending data (read timeout) (tried 2 times)" in str(info.value)
