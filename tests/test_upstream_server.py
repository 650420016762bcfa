"""The local upstream server: HEAD, Range, conditional requests, faults, containment, request log."""

from __future__ import annotations

import email.utils
import http.client
import socket
from pathlib import Path

import pytest

from tests.upstream import Fault, UpstreamServer, UpstreamTree

PATH = "/stable/deb/amd64/Packages"


def request(
    server: UpstreamServer, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def content(tree: UpstreamTree, path: str = PATH) -> bytes:
    return (tree.root / path.lstrip("/")).read_bytes()


def test_get_serves_the_file_with_validators(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    status, headers, body = request(upstream_server, "GET", PATH)
    assert status == 200 and body == content(upstream_tree)
    assert headers["content-length"] == str(len(body)) and headers["accept-ranges"] == "bytes"
    assert headers["etag"].startswith('"') and headers["last-modified"].endswith("GMT")


def test_head_sends_headers_without_body(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    status, headers, body = request(upstream_server, "HEAD", PATH)
    assert status == 200 and body == b""
    assert int(headers["content-length"]) == len(content(upstream_tree))
    assert upstream_server.log[-1].method == "HEAD" and upstream_server.log[-1].bytes_sent == 0


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=10-19", 10, 19),
        ("bytes=100-", 100, None),
        ("bytes=-5", -5, None),
        ("bytes=0-999999999", 0, None),
    ],
)
def test_range_returns_206_with_content_range(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree, header: str, start: int, end: int | None
) -> None:
    data = content(upstream_tree)
    expected = data[start : (end + 1 if end is not None else None)]
    status, headers, body = request(upstream_server, "GET", PATH, {"Range": header})
    assert status == 206 and body == expected
    first = start if start >= 0 else len(data) + start
    assert headers["content-range"] == f"bytes {first}-{first + len(expected) - 1}/{len(data)}"
    assert upstream_server.log[-1].range == header


@pytest.mark.parametrize("header", ["bytes=999999999-", "bytes=50-10", "bytes=-0", "lines=1-2"])
def test_unsatisfiable_range_returns_416(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree, header: str
) -> None:
    status, headers, _ = request(upstream_server, "GET", PATH, {"Range": header})
    assert status == 416 and headers["content-range"] == f"bytes */{len(content(upstream_tree))}"


def test_if_none_match_with_current_etag_returns_304(upstream_server: UpstreamServer) -> None:
    _, headers, _ = request(upstream_server, "HEAD", PATH)
    status, again, body = request(upstream_server, "GET", PATH, {"If-None-Match": headers["etag"]})
    assert status == 304 and body == b"" and again["etag"] == headers["etag"]
    assert request(upstream_server, "GET", PATH, {"If-None-Match": '"stale"'})[0] == 200


def test_if_modified_since_returns_304_unless_the_file_is_newer(upstream_server: UpstreamServer) -> None:
    _, headers, _ = request(upstream_server, "HEAD", PATH)
    assert request(upstream_server, "GET", PATH, {"If-Modified-Since": headers["last-modified"]})[0] == 304
    old = email.utils.formatdate(0, usegmt=True)
    assert request(upstream_server, "GET", PATH, {"If-Modified-Since": old})[0] == 200


def test_if_range_with_a_stale_etag_sends_the_whole_file(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    status, _, body = request(upstream_server, "GET", PATH, {"Range": "bytes=0-9", "If-Range": '"stale"'})
    assert status == 200 and body == content(upstream_tree)


def test_drop_after_closes_the_connection_mid_body(upstream_server: UpstreamServer) -> None:
    fault = upstream_server.inject(PATH, Fault.drop_after(100))
    with pytest.raises(http.client.IncompleteRead) as excinfo:
        request(upstream_server, "GET", PATH)
    assert len(excinfo.value.partial) == 100
    assert fault.hits == 1 and upstream_server.log[-1].bytes_sent == 100


def test_drop_after_also_cuts_a_resumed_range(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    upstream_server.inject(PATH, Fault.drop_after(10))
    with pytest.raises(http.client.IncompleteRead) as excinfo:
        request(upstream_server, "GET", PATH, {"Range": "bytes=50-"})
    assert excinfo.value.partial == content(upstream_tree)[50:60]


def test_fail_first_k_requests_then_serve(upstream_server: UpstreamServer) -> None:
    fault = upstream_server.inject("stable/deb/amd64/InRelease", Fault.fail_first(2, status=503))
    statuses = [request(upstream_server, "GET", "/stable/deb/amd64/InRelease")[0] for _ in range(3)]
    assert statuses == [503, 503, 200] and fault.hits == 2


def test_error_fault_answers_500_every_time(upstream_server: UpstreamServer) -> None:
    upstream_server.inject("gpgkey", Fault.error(500))
    assert [request(upstream_server, "GET", "/gpgkey")[0] for _ in range(3)] == [500, 500, 500]


def test_hold_fault_stalls_the_body_until_released(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    fault = upstream_server.inject(PATH, Fault.hold(100))
    conn = http.client.HTTPConnection("127.0.0.1", upstream_server.port, timeout=10)
    try:
        conn.request("GET", PATH)
        fault.wait_stalled()
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read1(1000) == content(upstream_tree)[:100]
        assert upstream_server.requests_for(PATH)[0].status == 200  # logged while it stalls
        # Loopback: what the server wrote before it stalled is already here; nothing else is.
        conn.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            conn.sock.recv(1, socket.MSG_PEEK)
        conn.sock.settimeout(10)
        fault.release()
        assert resp.read() == content(upstream_tree)[100:]
    finally:
        conn.close()
    assert request(upstream_server, "GET", PATH)[2] == content(upstream_tree)  # later ones go through
    assert fault.hits == 1


def test_corrupt_flips_one_byte_only_when_the_response_contains_it(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    data = content(upstream_tree)
    upstream_server.inject(PATH, Fault.corrupt(5))
    _, _, body = request(upstream_server, "GET", PATH)
    assert len(body) == len(data) and body[5] == data[5] ^ 0xFF
    assert body[:5] == data[:5] and body[6:] == data[6:]
    assert request(upstream_server, "GET", PATH, {"Range": "bytes=10-20"})[2] == data[10:21]


def test_not_found_fault_hides_an_existing_file(upstream_server: UpstreamServer) -> None:
    upstream_server.inject("/gpgkey", Fault.not_found())
    assert request(upstream_server, "GET", "/gpgkey")[0] == 404


def test_clear_removes_faults_and_log(upstream_server: UpstreamServer) -> None:
    upstream_server.inject("/gpgkey", Fault.not_found())
    request(upstream_server, "GET", "/gpgkey")
    upstream_server.clear()
    assert upstream_server.log == []
    assert request(upstream_server, "GET", "/gpgkey")[0] == 200


@pytest.mark.parametrize(
    "path", ["/../../etc/passwd", "/stable/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd"]
)
def test_paths_outside_the_root_are_refused(upstream_server: UpstreamServer, path: str) -> None:
    status, _, body = request(upstream_server, "GET", path)
    assert status in (403, 404) and b"root:" not in body


def test_missing_files_and_directories_are_404(upstream_server: UpstreamServer) -> None:
    assert request(upstream_server, "GET", "/stable/deb/amd64/Release")[0] == 404
    assert request(upstream_server, "GET", "/stable/deb/")[0] == 404


def test_log_records_method_path_status_headers_and_bytes(
    upstream_server: UpstreamServer, upstream_tree: UpstreamTree
) -> None:
    request(upstream_server, "GET", PATH + "?x=1", {"Range": "bytes=0-3", "User-Agent": "t"})
    record = upstream_server.requests_for(PATH)[-1]
    assert (record.method, record.path, record.status, record.bytes_sent) == ("GET", PATH, 206, 4)
    assert record.headers["user-agent"] == "t" and record.range == "bytes=0-3"


def test_keep_alive_serves_several_requests_on_one_connection(upstream_server: UpstreamServer) -> None:
    # http.client reconnects on its own after a "Connection: close", so only the server's count of
    # accepted connections tells keep-alive from three connections.
    before = upstream_server.connections
    conn = http.client.HTTPConnection("127.0.0.1", upstream_server.port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/gpgkey")
            assert conn.getresponse().read().startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----")
    finally:
        conn.close()
    assert upstream_server.connections - before == 1


def test_own_server_on_a_tree_copy_picks_a_free_port_and_stops(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"hello")
    with UpstreamServer(tmp_path) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        assert request(server, "GET", "/f")[2] == b"hello"
    with pytest.raises(OSError):
        request(server, "GET", "/f")


def test_a_client_hanging_up_prints_no_traceback(
    upstream_server: UpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = upstream_server._httpd  # the socketserver behind it
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
