"""The OCI transport's pure parts (references, challenges, Docker's config, the artifact manifest) and the
client's HTTP behaviour against a scripted loopback server (redirects, retries, oversized blobs)."""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import os
import re
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from installer.oci import artifact
from installer.oci.auth import Authorizer, TokenRequest
from installer.oci.client import RegistryAccess, RegistryClient
from installer.oci.credentials import Challenge, Credentials, from_docker_config, parse_challenge
from installer.oci.errors import DigestMismatch, RegistryAuthError, RegistryError, RegistryUnreachable
from installer.oci.reference import Reference, parse_reference
from plumbing.errors import ConfigFormatError, ExitCode, UsageError
from plumbing.rate import TransferTooSlow
from tests.drip import drip, dripping_headers
from tests.oci_registry import make_tls

DIGEST = "sha256:" + "ab" * 32

# -- references ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("oci://127.0.0.1:5000/team/nvct:1.17.8", Reference("127.0.0.1:5000", "team/nvct", "1.17.8")),
        ("oci://registry.example/nvct@" + DIGEST, Reference("registry.example", "nvct", None, DIGEST)),
        ("oci://[::1]:5000/a/b/c:v1_x-y", Reference("[::1]:5000", "a/b/c", "v1_x-y")),
        ("oci://localhost/x__y.z:t", Reference("localhost", "x__y.z", "t")),
    ],
)
def test_reference_parses_host_repository_and_tag_or_digest(text: str, expected: Reference) -> None:
    assert parse_reference(text) == expected
    assert str(parse_reference(text)) == text


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("https://host/repo:tag", "is not a registry reference"),
        ("oci://host/repo", "names no tag or digest"),
        ("oci://host/Repo:tag", "malformed repository"),
        ("oci://host/repo/../x:tag", "malformed repository"),
        ("oci://host/repo@sha256:short", "malformed digest"),
        ("oci://host/repo:-tag", "malformed tag"),
        ("oci://host:99999/repo:tag", "does not start with a registry host"),
        ("oci:///repo:tag", "does not start with a registry host"),
    ],
)
def test_malformed_reference_is_a_usage_error_naming_the_part(text: str, complaint: str) -> None:
    with pytest.raises(UsageError, match=complaint):
        parse_reference(text)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:5000", True),
        ("127.8.9.1", True),
        ("localhost:80", True),
        ("[::1]:5000", True),
        ("10.0.0.1:5000", False),
        ("registry.example", False),
        ("localhost.example", False),
    ],
)
def test_only_loopback_hosts_count_as_loopback(host: str, loopback: bool) -> None:
    assert Reference(host, "r", "t").is_loopback is loopback


# -- challenges and credentials -----------------------------------------------------------------


def test_bearer_challenge_parses_quoted_parameters_with_commas() -> None:
    header = (
        'Bearer realm="https://auth.example/token",service="harbor-registry",scope="repository:a/b:pull,push"'
    )
    challenge = parse_challenge(header)
    assert challenge.scheme == "bearer"
    assert challenge.params == {
        "realm": "https://auth.example/token",
        "service": "harbor-registry",
        "scope": "repository:a/b:pull,push",
    }
    assert parse_challenge('Basic realm="Registry Realm"').scheme == "basic"


def _config(tmp_path: Path, auths: object) -> Dict[str, str]:
    (tmp_path / "config.json").write_text(json.dumps({"auths": auths}))
    return {"DOCKER_CONFIG": str(tmp_path)}


def test_docker_config_matches_url_and_plain_keys_and_prefers_identity_tokens(tmp_path: Path) -> None:
    auth = base64.b64encode(b"ops:pa:ss").decode()
    env = _config(
        tmp_path,
        {
            "https://reg.example:5000/v1/": {"auth": auth},
            "tok.example": {"auth": auth, "identitytoken": "IDT"},
        },
    )
    assert from_docker_config("reg.example:5000", env) == Credentials(
        "ops", "pa:ss", source=f"{tmp_path}/config.json (reg.example:5000)"
    )
    token = from_docker_config("tok.example", env)
    assert token is not None and token.identity_token == "IDT" and not token.password
    assert from_docker_config("other.example", env) is None
    assert from_docker_config("reg.example:5000", {"HOME": str(tmp_path / "nowhere")}) is None


def test_docker_config_with_a_broken_auth_is_a_config_error(tmp_path: Path) -> None:
    env = _config(tmp_path, {"reg.example": {"auth": "not base64!"}})
    with pytest.raises(ConfigFormatError, match="not base64 of user:password") as info:
        from_docker_config("reg.example", env)
    assert info.value.exit_code == ExitCode.CONFIG


# -- the artifact manifest ----------------------------------------------------------------------


def _layers(*specs: Tuple[str, str]) -> List[artifact.Layer]:
    return [artifact.Layer(media_type, DIGEST, 10, title) for media_type, title in specs]


SPLIT = _layers(
    (artifact.PART_LAYER, "b.tar.part001"),
    (artifact.PART_LAYER, "b.tar.part002"),
    (artifact.SUMS_LAYER, "b.tar.sha256sums"),
    (artifact.SUMS_SIGNATURE_LAYER, "b.tar.sha256sums.asc"),
)


def test_rendered_manifest_parses_back_to_its_layers() -> None:
    whole = _layers((artifact.bundle_layer_type("zstd"), "b.tar.zst"))
    found = artifact.parse_manifest(artifact.render_manifest(whole, {"k": "v"}), "ref")
    assert found.layers == tuple(whole) and found.entry == "b.tar.zst" and not found.split
    split = artifact.parse_manifest(artifact.render_manifest(SPLIT, {}), "ref")
    assert split.split and split.entry == "b.tar.part001" and split.base_name == "b.tar"
    doc = json.loads(artifact.render_manifest(SPLIT, {}))
    assert doc["config"]["digest"] == "sha256:" + hashlib.sha256(artifact.EMPTY_CONFIG).hexdigest()


def _broken(mutate: Callable[[Dict[str, object]], None]) -> bytes:
    doc = json.loads(artifact.render_manifest(SPLIT, {}))
    mutate(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b"not json", "did not serve a JSON manifest"),
        (
            _broken(lambda d: d.update(mediaType="application/vnd.docker.distribution.manifest.v2+json")),
            "is a application/vnd.docker",
        ),
        (
            _broken(lambda d: d.update(artifactType="application/vnd.example.other")),
            "not a gpu-airgap bundle",
        ),
        (_broken(lambda d: d.pop("artifactType")), "is a application/vnd.oci.empty.v1\\+json artifact"),
        (
            _broken(lambda d: d["layers"][0]["annotations"].update({artifact.TITLE: "../../etc/passwd"})),
            "plain file name",
        ),  # type: ignore[index]
        (
            _broken(lambda d: d["layers"][0]["annotations"].update({artifact.TITLE: ".hidden"})),
            "plain file name",
        ),  # type: ignore[index]
        (_broken(lambda d: d["layers"][0].update(mediaType="application/x-sh")), "unknown media type"),  # type: ignore[index]
        (_broken(lambda d: d["layers"][0].update(digest="sha512:00")), "sha256:<64 hex digits>"),  # type: ignore[index]
        (_broken(lambda d: d["layers"][0].update(size=-1)), "malformed size"),  # type: ignore[index]
        (_broken(lambda d: d["layers"].reverse()), "neither one bundle layer"),  # type: ignore[attr-defined]
        (
            _broken(lambda d: d["layers"][1]["annotations"].update({artifact.TITLE: "b.tar.part003"})),
            "not BASE.part001",
        ),  # type: ignore[index]
        (_broken(lambda d: d.update(layers=[])), "no layers"),
    ],
)
def test_manifest_that_is_not_a_safe_bundle_artifact_is_refused(data: bytes, complaint: str) -> None:
    with pytest.raises(artifact.ArtifactError, match=complaint) as info:
        artifact.parse_manifest(data, "oci://h/r:t")
    assert info.value.exit_code == ExitCode.VERIFICATION_FAILED


# -- the client against a scripted server --------------------------------------------------------


@dataclass
class Scripted:
    """A loopback HTTP server answering from ``routes`` (path -> handler) and recording every request."""

    routes: Dict[str, Callable[[BaseHTTPRequestHandler], None]] = field(default_factory=dict)
    seen: List[Tuple[str, Optional[str]]] = field(default_factory=list)  #: (path, Authorization)
    tls: Optional[ssl.SSLContext] = None  #: speak TLS too, on the same port (sniffed per connection)
    plain: List[Tuple[str, Optional[str]]] = field(default_factory=list)  #: what arrived over plain http

    def start(self) -> Tuple[ThreadingHTTPServer, str]:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                script.seen.append((self.path, self.headers.get("Authorization")))
                if not isinstance(self.connection, ssl.SSLSocket):
                    script.plain.append(script.seen[-1])
                route = script.routes.get(f"{self.command} {self.path}") or script.routes.get(self.path)
                (route or _not_found)(self)

            def do_OTHER(self) -> None:  # HEAD, POST, PUT: the body is read, then routed like a GET
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            do_HEAD = do_POST = do_PUT = do_OTHER

        class Server(ThreadingHTTPServer):
            def get_request(self) -> Tuple[socket.socket, object]:
                sock, address = super().get_request()
                if script.tls is not None and sock.recv(1, socket.MSG_PEEK) == b"\x16":  # a TLS hello
                    sock = script.tls.wrap_socket(sock, server_side=True)
                return sock, address

        server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return server, f"127.0.0.1:{server.server_address[1]}"


def _not_found(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(404)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def _serve(
    body: bytes, status: int = 200, headers: Optional[Dict[str, str]] = None
) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in (headers or {"Content-Length": str(len(body))}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.fixture()
def servers() -> Iterator[Tuple[Scripted, str, Scripted, str]]:
    registry, storage = Scripted(), Scripted()
    (reg_server, reg_host), (store_server, store_host) = registry.start(), storage.start()
    yield registry, reg_host, storage, store_host
    for server in (reg_server, store_server):
        server.shutdown()
        server.server_close()


def _client(host: str, **access: object) -> RegistryClient:
    creds = Credentials("ops", "s3cret")
    return RegistryClient(
        host, RegistryAccess(credentials=creds, plain_http=True, **access), sleep=lambda _: None
    )  # type: ignore[arg-type]


def test_blob_redirected_to_another_host_is_fetched_without_the_registry_credentials(
    servers: Tuple[Scripted, str, Scripted, str], tmp_path: Path
) -> None:
    registry, reg_host, storage, store_host = servers
    data = b"blob bytes" * 1000
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    needs_basic = _serve(b"", 401, {"WWW-Authenticate": 'Basic realm="r"', "Content-Length": "0"})

    def blob(handler: BaseHTTPRequestHandler) -> None:
        if handler.headers.get("Authorization") is None:
            return needs_basic(handler)
        return _serve(b"", 307, {"Location": f"http://{store_host}/s3/object?sig=1", "Content-Length": "0"})(
            handler
        )

    registry.routes[f"/v2/team/nvct/blobs/{digest}"] = blob
    storage.routes["/s3/object?sig=1"] = _serve(data)
    _client(reg_host).fetch_blob("team/nvct", digest, len(data), tmp_path / "blob")
    assert (tmp_path / "blob").read_bytes() == data
    assert registry.seen[-1][1] == "Basic " + base64.b64encode(b"ops:s3cret").decode()
    assert storage.seen == [("/s3/object?sig=1", None)]


def _with_basic(answer: Callable[[BaseHTTPRequestHandler], None]) -> Callable[[BaseHTTPRequestHandler], None]:
    """A route that wants basic credentials, then gives ``answer``."""
    needs_basic = _serve(b"", 401, {"WWW-Authenticate": 'Basic realm="r"', "Content-Length": "0"})
    return lambda handler: (needs_basic if handler.headers.get("Authorization") is None else answer)(handler)


def _redirecting(location: str) -> Callable[[BaseHTTPRequestHandler], None]:
    """A blob route that wants basic credentials, then redirects to ``location``."""
    return _with_basic(_serve(b"", 307, {"Location": location, "Content-Length": "0"}))


def test_a_redirect_from_https_to_plain_http_on_the_same_host_is_refused_before_credentials_leave(
    tmp_path: Path,
) -> None:
    ca, cert, key = make_tls(tmp_path / "tls")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    registry = Scripted(tls=context)
    server, host = registry.start()
    try:
        registry.routes[f"/v2/r/blobs/{DIGEST}"] = _redirecting(f"http://{host}/plain/blob")
        registry.routes["/plain/blob"] = _serve(b"x")
        client = RegistryClient(
            host, RegistryAccess(credentials=Credentials("ops", "s3cret"), ca_file=ca), sleep=lambda _: None
        )
        with pytest.raises(RegistryError, match=r"from https to plain http .*refusing to downgrade"):
            client.fetch_blob("r", DIGEST, 1, tmp_path / "blob")
    finally:
        server.shutdown()
        server.server_close()
    assert registry.seen[-1][1] == "Basic " + base64.b64encode(b"ops:s3cret").decode()  # over TLS
    assert registry.plain == [] and not (tmp_path / "blob").exists()


def test_an_upload_sent_to_other_storage_goes_without_the_registry_credentials(
    servers: Tuple[Scripted, str, Scripted, str],
) -> None:
    registry, reg_host, storage, store_host = servers
    data = b"layer"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    registry.routes["POST /v2/r/blobs/uploads/"] = _with_basic(
        _serve(b"", 202, {"Location": f"http://{store_host}/upload?sig=1", "Content-Length": "0"})
    )
    storage.routes[f"PUT /upload?sig=1&digest={urllib.parse.quote(digest)}"] = _serve(b"", 201)
    assert _client(reg_host).upload_blob("r", digest, len(data), functools.partial(io.BytesIO, data))
    assert registry.seen[-1] == ("/v2/r/blobs/uploads/", "Basic " + base64.b64encode(b"ops:s3cret").decode())
    assert storage.seen == [(f"/upload?sig=1&digest={urllib.parse.quote(digest)}", None)]


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_redirect_to_a_local_file_is_refused_without_opening_it(
    kind: str, servers: Tuple[Scripted, str, Scripted, str], tmp_path: Path
) -> None:
    registry, reg_host, _, _ = servers
    target = tmp_path / "target"
    if kind == "fifo":  # opened, it would wait forever for a writer
        os.mkfifo(target)
    else:
        target.write_bytes(b"x")
    registry.routes[f"/v2/r/blobs/{DIGEST}"] = _redirecting(target.as_uri())
    refused: List[RegistryError] = []

    def fetch() -> None:
        try:
            _client(reg_host).fetch_blob("r", DIGEST, 1, tmp_path / "blob")
        except RegistryError as error:
            refused.append(error)

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # it opened the FIFO: a writer lets it go, so the test ends
        with open(target, "wb"):
            pass
        worker.join(10)
        pytest.fail("the client followed the redirect into a local FIFO and waited on it")
    assert refused, "the client followed the redirect to a local file"
    error = refused[0]
    assert "only http and https redirects are followed" in str(error)
    assert target.as_uri() in str(error) and error.exit_code == ExitCode.ERROR
    assert not (tmp_path / "blob").exists()


@pytest.mark.parametrize("what", ["blob", "manifest"])
def test_a_body_that_drips_below_the_minimum_rate_is_abandoned_with_a_network_error(
    what: str, servers: Tuple[Scripted, str, Scripted, str], tmp_path: Path
) -> None:
    registry, reg_host, _, _ = servers
    data = b"x" * 400
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = f"/v2/r/blobs/{digest}" if what == "blob" else "/v2/r/manifests/t"
    registry.routes[path] = functools.partial(drip, data=data)
    ticks = iter(range(0, 10_000, 5))  # every look at the clock is 5 s later: 1 byte / 5 s
    client = RegistryClient(
        reg_host, RegistryAccess(plain_http=True), sleep=lambda _: None, now=lambda: float(next(ticks))
    )
    with pytest.raises(
        TransferTooSlow, match=r"bytes/s over the last 60 s, below the --min-rate of 1024"
    ) as info:
        if what == "blob":
            client.fetch_blob("r", digest, len(data), tmp_path / "blob")
        else:
            client.get_manifest(Reference(reg_host, "r", "t"), [artifact.MANIFEST_MEDIA_TYPE])
    assert info.value.exit_code == ExitCode.NETWORK and str(info.value).startswith(
        f"blob {digest}" if what == "blob" else f"the manifest of oci://{reg_host}/r:t"
    )
    assert not (tmp_path / "blob").exists() and len(registry.seen) == 1  # not retried


@pytest.fixture()
def header_dripper() -> Iterator[str]:
    with dripping_headers() as host:
        yield host


def test_headers_dripping_past_their_deadline_are_a_network_error(header_dripper: str) -> None:
    access = RegistryAccess(plain_http=True, header_deadline=0.3, attempts=2)
    client = RegistryClient(header_dripper, access, sleep=lambda _: None)
    with pytest.raises(
        RegistryUnreachable, match=r"no complete status line and headers within 0\.3 s"
    ) as info:
        client.get_manifest(Reference(header_dripper, "r", "t"), [artifact.MANIFEST_MEDIA_TYPE])
    assert info.value.exit_code == ExitCode.NETWORK


def test_reads_are_retried_after_a_503_and_fail_as_network_errors_when_it_persists(
    servers: Tuple[Scripted, str, Scripted, str],
) -> None:
    registry, reg_host, _, _ = servers
    manifest = artifact.render_manifest(SPLIT, {})
    answers = [_serve(b"busy", 503), _serve(manifest, 200)]
    registry.routes["/v2/r/manifests/t"] = lambda handler: answers.pop(0)(handler)
    data, digest = _client(reg_host).get_manifest(
        Reference(reg_host, "r", "t"), [artifact.MANIFEST_MEDIA_TYPE]
    )
    assert data == manifest and digest == "sha256:" + hashlib.sha256(manifest).hexdigest()
    registry.routes["/v2/r/manifests/t"] = _serve(b"busy", 503)
    with pytest.raises(RegistryUnreachable, match="failed with HTTP 503") as info:
        _client(reg_host).get_manifest(Reference(reg_host, "r", "t"), [artifact.MANIFEST_MEDIA_TYPE])
    assert info.value.exit_code == ExitCode.NETWORK and len(registry.seen) == 2 + 3


def test_blob_longer_than_its_descriptor_is_cut_off_and_removed(
    servers: Tuple[Scripted, str, Scripted, str], tmp_path: Path
) -> None:
    registry, reg_host, _, _ = servers
    data = b"x" * 3000
    digest = "sha256:" + hashlib.sha256(data[:1000]).hexdigest()
    registry.routes[f"/v2/r/blobs/{digest}"] = _serve(
        data, headers={"Connection": "close"}
    )  # no Content-Length
    with pytest.raises(DigestMismatch, match="runs past the 1000 bytes"):
        _client(reg_host).fetch_blob("r", digest, 1000, tmp_path / "blob")
    assert not (tmp_path / "blob").exists()
    registry.routes[f"/v2/r/blobs/{digest}"] = _serve(data)
    with pytest.raises(DigestMismatch, match="is 3000 bytes, its manifest says 1000"):
        _client(reg_host).fetch_blob("r", digest, 1000, tmp_path / "blob2")


# -- the authorizer ------------------------------------------------------------------------------


def _authorizer(
    creds: Optional[Credentials], answers: List[str], *, plain: bool = False
) -> Tuple[Authorizer, List[TokenRequest]]:
    sent: List[TokenRequest] = []

    def fetch(request: TokenRequest) -> Tuple[int, bytes]:
        sent.append(request)
        return 200, json.dumps({"token": answers.pop(0)}).encode()

    return Authorizer("reg.example", creds, fetch, plain_http=lambda: plain), sent


def _bearer(scope: str, realm: str = "https://auth.example/token") -> Challenge:
    return parse_challenge(f'Bearer realm="{realm}",service="reg",scope="{scope}"')


def test_identity_token_is_exchanged_with_an_oauth2_post_and_no_basic_header() -> None:
    auth, sent = _authorizer(Credentials("ops", identity_token="IDT"), ["T1"])
    auth.learn(_bearer("repository:team/nvct:pull"), "team/nvct", ("pull",))
    assert sent[0].method == "POST" and "Authorization" not in sent[0].headers and sent[0].body is not None
    form = dict(urllib.parse.parse_qsl(sent[0].body.decode()))
    assert form == {
        "service": "reg",
        "scope": "repository:team/nvct:pull",
        "grant_type": "refresh_token",
        "refresh_token": "IDT",
        "client_id": "gpu-airgap",
    }
    assert auth.header("team/nvct", ("pull",)) == "Bearer T1"


def test_a_refused_token_is_replaced_and_a_push_token_serves_pulls() -> None:
    auth, _ = _authorizer(Credentials("ops", "pw"), ["PUSH-OLD", "PULL-NEW"])
    auth.learn(_bearer("repository:r:pull,push"), "r", ("pull", "push"))
    assert auth.header("r", ("pull",)) == "Bearer PUSH-OLD"  # covers pulls
    auth.learn(_bearer("repository:r:pull"), "r", ("pull",))  # the registry refused it (expired)
    assert auth.header("r", ("pull",)) == "Bearer PULL-NEW" and auth.header("r", ("pull", "push")) is None
    assert auth.header("other", ("pull",)) is None


@pytest.mark.parametrize(
    ("realm", "plain", "sent"),
    [
        ("http://auth.example/token", True, True),  # --plain-http: the user allowed it
        ("http://127.0.0.1:5001/token", False, True),  # never leaves this host
        ("http://[::1]:5001/token", False, True),
        (
            "http://auth.example/token",
            False,
            False,
        ),  # a loopback registry fallen back to http is no permission
    ],
)
def test_credentials_go_to_a_plain_http_realm_only_with_plain_http_or_on_loopback(
    realm: str, plain: bool, sent: bool
) -> None:
    auth, requests = _authorizer(Credentials("ops", "pw"), ["T"], plain=plain)
    if sent:
        auth.learn(_bearer("repository:r:pull", realm=realm), "r", ("pull",))
        assert requests[0].headers == {"Authorization": Credentials("ops", "pw").basic()}
        return
    with pytest.raises(RegistryAuthError, match="over plain http; refusing"):
        auth.learn(_bearer("repository:r:pull", realm=realm), "r", ("pull",))
    assert requests == []


def test_a_loopback_registry_without_tls_does_not_send_credentials_to_a_remote_plain_http_realm(
    servers: Tuple[Scripted, str, Scripted, str],
) -> None:
    registry, reg_host, _, _ = servers
    challenge = 'Bearer realm="http://auth.example.invalid/token",service="s"'
    registry.routes["/v2/r/manifests/t"] = _serve(
        b"", 401, {"WWW-Authenticate": challenge, "Content-Length": "0"}
    )
    access = RegistryAccess(
        credentials=Credentials("ops", "s3cret")
    )  # no --plain-http: http only as a fallback
    client = RegistryClient(reg_host, access, loopback=True, sleep=lambda _: None)
    with pytest.raises(
        RegistryAuthError, match=re.escape("to http://auth.example.invalid/token over plain http; refusing")
    ):
        client.get_manifest(Reference(reg_host, "r", "t"), [artifact.MANIFEST_MEDIA_TYPE])


def test_credentials_are_not_sent_to_a_plain_http_realm_of_a_tls_registry() -> None:
    auth, sent = _authorizer(Credentials("ops", "pw"), ["T"])
    with pytest.raises(RegistryAuthError, match="over plain http; refusing"):
        auth.learn(_bearer("repository:r:pull", realm="http://auth.example/token"), "r", ("pull",))
    assert sent == []
    anonymous, sent = _authorizer(None, ["T"])
    anonymous.learn(_bearer("repository:r:pull", realm="http://auth.example/token"), "r", ("pull",))
    assert sent[0].headers == {} and anonymous.header("r", ("pull",)) == "Bearer T"
