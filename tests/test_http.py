"""The downloader against a real HTTP server on 127.0.0.1 with scripted faults."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mirror.errors import FetchError
from mirror.sync.http import Downloader, DownloadRequest
from mirror.sync.transaction import CachedResponse
from plumbing.errors import ChecksumMismatch


@dataclass
class Fault:
    """What the server does wrong for one path."""

    drop_after: int | None = None  #: close the connection after this many body bytes (first request only)
    fail_first: int = 0  #: answer 503 to this many requests first
    status: int | None = None  #: always answer this status
    ignore_range: bool = False
    corrupt: bool = False


@dataclass
class Site:
    files: dict[str, bytes] = field(default_factory=dict)
    faults: dict[str, Fault] = field(default_factory=dict)
    log: list[tuple[str, str, int, dict[str, str]]] = field(
        default_factory=list
    )  # method, path, status, headers
    served: dict[str, int] = field(default_factory=dict)  # body bytes sent per path
    base: str = ""
    last_modified_only: bool = False  #: validate with Last-Modified / If-Modified-Since, send no ETag

    def requests_for(self, path: str) -> list[dict[str, str]]:
        return [headers for _, p, _, headers in self.log if p == path]


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path
            headers = {k: v for k, v in self.headers.items()}
            fault = site.faults.get(path, Fault())
            body = site.files.get(path)
            status, extra = 200, {}
            if fault.fail_first > 0:
                fault.fail_first -= 1
                status = 503
            elif fault.status is not None or body is None:
                status = fault.status or 404
            if status != 200:
                site.log.append(("GET", path, status, headers))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            assert body is not None
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if site.last_modified_only:
                etag, extra["Last-Modified"] = "", "Sat, 01 Nov 2025 10:00:00 GMT"
                if self.headers.get("If-Modified-Since") == extra["Last-Modified"]:
                    site.log.append(("GET", path, 304, headers))
                    self.send_response(304)
                    self.end_headers()
                    return
            if etag and self.headers.get("If-None-Match") == etag:
                site.log.append(("GET", path, 304, headers))
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            if fault.corrupt:
                body = body[:-1] + bytes([body[-1] ^ 0xFF])
            start = 0
            rng = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if rng and not fault.ignore_range and if_range in (None, etag, extra.get("Last-Modified")):
                start = int(rng.split("=")[1].rstrip("-"))
                status = 206
                extra["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
            payload = body[start:]
            site.log.append(("GET", path, status, headers))
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            if etag:
                self.send_header("ETag", etag)
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            if fault.drop_after is not None:
                cut = fault.drop_after
                fault.drop_after = None
                site.served[path] = site.served.get(path, 0) + cut
                self.wfile.write(payload[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            site.served[path] = site.served.get(path, 0) + len(payload)
            self.wfile.write(payload)

    return Handler


@pytest.fixture
def site() -> Iterator[Site]:
    site = Site()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield site
    server.shutdown()
    server.server_close()


class MemoryCache:
    def __init__(self) -> None:
        self.entries: dict[str, CachedResponse] = {}

    def lookup(self, url: str) -> CachedResponse | None:
        return self.entries.get(url)

    def remember(self, url: str, response: CachedResponse) -> None:
        self.entries[url] = response


def _downloader(sleeps: list[float] | None = None, **kwargs: int) -> Downloader:
    record = sleeps if sleeps is not None else []
    return Downloader(sleep=record.append, **kwargs)  # type: ignore[arg-type]


BLOB = bytes(range(256)) * 4096  # 1 MiB


def _sha512(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest()


def test_download_writes_the_file_only_after_size_and_checksum_match(site: Site, tmp_path: Path) -> None:
    site.files["/a.deb"] = BLOB
    dest = tmp_path / "out" / "a.deb"
    seen: list[int] = []
    with _downloader() as dl:
        got = dl.download(
            f"{site.base}/a.deb", dest, size=len(BLOB), sha512=_sha512(BLOB), on_progress=seen.append
        )
    assert got == len(BLOB)
    assert dest.read_bytes() == BLOB
    assert sum(seen) == len(BLOB)
    assert [p.name for p in dest.parent.iterdir()] == ["a.deb"]


def test_download_resumes_a_dropped_connection_with_a_range_request(site: Site, tmp_path: Path) -> None:
    site.files["/a.deb"] = BLOB
    site.faults["/a.deb"] = Fault(drop_after=300_000)
    dest = tmp_path / "a.deb"
    with _downloader() as dl:
        dl.download(f"{site.base}/a.deb", dest, size=len(BLOB), sha256=hashlib.sha256(BLOB).hexdigest())
        assert dl.stats.resumed == 1
    assert dest.read_bytes() == BLOB
    ranges = [h.get("Range") for h in site.requests_for("/a.deb")]
    assert ranges == [None, "bytes=300000-"]
    assert site.served["/a.deb"] == len(BLOB)  # nothing fetched twice


def test_download_restarts_when_the_server_ignores_the_range(site: Site, tmp_path: Path) -> None:
    site.files["/a.deb"] = BLOB
    site.faults["/a.deb"] = Fault(drop_after=1000, ignore_range=True)
    dest = tmp_path / "a.deb"
    with _downloader() as dl:
        dl.download(f"{site.base}/a.deb", dest, size=len(BLOB), sha512=_sha512(BLOB))
    assert dest.read_bytes() == BLOB


def test_download_retries_503_with_bounded_backoff(site: Site, tmp_path: Path) -> None:
    site.files["/a.deb"] = BLOB
    site.faults["/a.deb"] = Fault(fail_first=3)
    sleeps: list[float] = []
    with _downloader(sleeps, retries=4) as dl:
        dl.download(f"{site.base}/a.deb", tmp_path / "a.deb", size=len(BLOB), sha512=_sha512(BLOB))
    assert sleeps == [0.5, 1.0, 2.0]
    assert (tmp_path / "a.deb").read_bytes() == BLOB


def test_download_gives_up_after_the_last_retry_with_one_sentence(site: Site, tmp_path: Path) -> None:
    site.files["/a.deb"] = BLOB
    site.faults["/a.deb"] = Fault(status=503)
    sleeps: list[float] = []
    with _downloader(sleeps, retries=2) as dl, pytest.raises(FetchError) as err:
        dl.download(f"{site.base}/a.deb", tmp_path / "a.deb", size=len(BLOB), sha512=_sha512(BLOB))
    assert err.value.status == 503
    assert (
        str(err.value)
        == f"could not download {site.base}/a.deb: the server answered HTTP 503 Service Unavailable (tried 3 times)"
    )
    assert len(sleeps) == 2
    assert list(tmp_path.iterdir()) == []


def test_download_reports_404_at_once_and_leaves_no_file(site: Site, tmp_path: Path) -> None:
    sleeps: list[float] = []
    with _downloader(sleeps) as dl, pytest.raises(FetchError, match="HTTP 404") as err:
        dl.download(f"{site.base}/missing.deb", tmp_path / "m.deb", size=10, sha512="0" * 128)
    assert err.value.status == 404
    assert sleeps == []
    assert list(tmp_path.iterdir()) == []


def test_download_rejects_corrupted_bytes_without_a_final_name(site: Site, tmp_path: Path) -> None:
    site.files["/a.deb"] = BLOB
    site.faults["/a.deb"] = Fault(corrupt=True)
    with _downloader() as dl, pytest.raises(ChecksumMismatch):
        dl.download(f"{site.base}/a.deb", tmp_path / "a.deb", size=len(BLOB), sha512=_sha512(BLOB))
    assert list(tmp_path.iterdir()) == []


def test_download_rejects_a_file_shorter_than_its_signed_size(site: Site, tmp_path: Path) -> None:
    site.files["/a.rpm"] = BLOB[:1000]
    with _downloader(retries=1) as dl, pytest.raises((ChecksumMismatch, FetchError)):
        dl.download(f"{site.base}/a.rpm", tmp_path / "a.rpm", size=len(BLOB), sha512=_sha512(BLOB))
    assert list(tmp_path.iterdir()) == []


def test_get_revalidates_with_etag_and_reuses_the_cached_body(site: Site) -> None:
    site.files["/InRelease"] = b"signed text"
    cache = MemoryCache()
    with _downloader() as dl:
        first = dl.get(f"{site.base}/InRelease", cache=cache)
        second = dl.get(f"{site.base}/InRelease", cache=cache)
        assert dl.stats.not_modified == 1
    assert first == second == b"signed text"
    statuses = [status for _, _, status, _ in site.log]
    assert statuses == [200, 304]
    assert site.requests_for("/InRelease")[1]["If-None-Match"].startswith('"')


def test_get_revalidates_with_if_modified_since_when_there_is_no_etag(site: Site) -> None:
    site.files["/repodata/repomd.xml"] = b"<repomd/>"
    site.last_modified_only = True
    cache = MemoryCache()
    with _downloader() as dl:
        dl.get(f"{site.base}/repodata/repomd.xml", cache=cache)
        assert dl.get(f"{site.base}/repodata/repomd.xml", cache=cache) == b"<repomd/>"
        assert dl.stats.not_modified == 1
    assert [status for _, _, status, _ in site.log] == [200, 304]
    second = site.requests_for("/repodata/repomd.xml")[1]
    assert second["If-Modified-Since"] == "Sat, 01 Nov 2025 10:00:00 GMT" and "If-None-Match" not in second


def test_get_fetches_new_bytes_when_upstream_changed(site: Site) -> None:
    site.files["/InRelease"] = b"old"
    cache = MemoryCache()
    with _downloader() as dl:
        dl.get(f"{site.base}/InRelease", cache=cache)
        site.files["/InRelease"] = b"new"
        assert dl.get(f"{site.base}/InRelease", cache=cache) == b"new"
    assert cache.entries[f"{site.base}/InRelease"].body == b"new"


def test_get_resumes_a_dropped_metadata_transfer_with_a_range_request(site: Site) -> None:
    site.files["/Packages.xz"] = BLOB
    site.faults["/Packages.xz"] = Fault(drop_after=300_000)
    with _downloader() as dl:
        assert dl.get(f"{site.base}/Packages.xz") == BLOB
        assert dl.stats.resumed == 1
    requests = site.requests_for("/Packages.xz")
    assert [h.get("Range") for h in requests] == [None, "bytes=300000-"]
    assert requests[1]["If-Range"] == '"' + hashlib.sha256(BLOB).hexdigest()[:16] + '"'
    assert site.served["/Packages.xz"] == len(BLOB)  # nothing fetched twice


def test_get_starts_over_when_the_file_changed_between_attempts(site: Site) -> None:
    new = bytes(reversed(BLOB))
    site.files["/Packages.xz"] = BLOB
    site.faults["/Packages.xz"] = Fault(drop_after=300_000)

    def republish(_: float) -> None:  # upstream publishes a new index while we wait to retry
        site.files["/Packages.xz"] = new

    with Downloader(sleep=republish) as dl:
        assert dl.get(f"{site.base}/Packages.xz") == new  # never the old head spliced onto the new tail
    assert [h.get("Range") for h in site.requests_for("/Packages.xz")] == [None, "bytes=300000-"]


def test_get_turns_a_refused_connection_into_fetch_error() -> None:
    with _downloader(retries=1) as dl, pytest.raises(FetchError, match="could not download"):
        dl.get("http://127.0.0.1:9/nothing")


def test_download_many_fetches_in_parallel_and_stops_at_first_failure(site: Site, tmp_path: Path) -> None:
    items = []
    for i in range(6):
        data = bytes([i]) * 200_000
        site.files[f"/f{i}.deb"] = data
        items.append(
            DownloadRequest(f"{site.base}/f{i}.deb", tmp_path / f"f{i}.deb", len(data), sha512=_sha512(data))
        )
    with _downloader(jobs=3) as dl:
        assert dl.download_many(items) == 6 * 200_000
    assert all(item.dest.read_bytes() == site.files[f"/{item.dest.name}"] for item in items)
    bad = [*items, DownloadRequest(f"{site.base}/missing.deb", tmp_path / "missing.deb", 5, sha512="0" * 128)]
    with _downloader(jobs=3) as dl, pytest.raises(FetchError, match="404"):
        dl.download_many(bad)
    assert not (tmp_path / "missing.deb").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
