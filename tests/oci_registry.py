"""Real registries for the OCI transport tests: Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1.

:class:`Registry` runs ``docker-registry serve`` with its own config file and storage directory on
a free port (never the Debian service, which it neither needs nor touches) and stops it by PID.
Auth is off, ``htpasswd`` (basic) or ``token`` (bearer: realm = a :class:`TokenServer` running in
the test process). :func:`make_tls` makes a CA and a server certificate for 127.0.0.1 with the
real ``openssl``; :func:`htpasswd_file` uses the real ``htpasswd`` (apache2-utils).

The token server follows distribution's token spec: ``GET /token?service=…&scope=…`` with basic
credentials, or the OAuth2 ``POST`` with a refresh token (Docker's ``identitytoken``); it issues
an ES256 JWT whose ``kid`` is the libtrust fingerprint of the key in the registry's
``rootcertbundle``. Anonymous clients get a token that grants nothing, as Docker Hub's does.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

SERVICE = "gpu-airgap-test-registry"
ISSUER = "gpu-airgap-test-tokens"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Registry:
    """``docker-registry serve CONFIG`` on 127.0.0.1:<free port>; a context manager."""

    def __init__(
        self, workdir: Path, *, auth: Optional[Dict[str, Any]] = None, tls: Optional[Tuple[Path, Path]] = None
    ) -> None:
        self.workdir = workdir
        self.storage = workdir / "storage"
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.tls = tls
        http: Dict[str, Any] = {"addr": self.host, "secret": "gpu-airgap-test"}
        if tls is not None:
            http["tls"] = {"certificate": str(tls[0]), "key": str(tls[1])}
        config: Dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True}},
            "http": http,
        }
        if auth:
            config["auth"] = auth
        self.config = workdir / "config.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(json.dumps(config))  # YAML is a superset of JSON
        self.log = workdir / "registry.log"
        self._proc: Optional[subprocess.Popen[bytes]] = None

    def __enter__(self) -> Registry:
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(
                ["docker-registry", "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"docker-registry exited with {self._proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"docker-registry did not listen on {self.host}: {self.log.read_text()[-2000:]}")

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()  # by PID: the process we started, nothing else
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def ref(self, repository_and_tag: str) -> str:
        """``oci://127.0.0.1:PORT/`` + ``repository_and_tag``."""
        return f"oci://{self.host}/{repository_and_tag}"

    def blob_data(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes (manifests are blobs too)."""
        hexdigest = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"


def htpasswd_file(path: Path, users: Dict[str, str]) -> Path:
    """An htpasswd file with bcrypt entries (what distribution accepts), made by ``htpasswd -B``."""
    lines = [
        subprocess.run(
            ["htpasswd", "-Bbn", user, password], check=True, capture_output=True, text=True
        ).stdout.strip()
        for user, password in users.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_tls(directory: Path) -> Tuple[Path, Path, Path]:
    """A test CA and a server certificate for 127.0.0.1/localhost signed by it, made with openssl: (ca, cert, key)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key, cert, key = (directory / n for n in ("ca.pem", "ca.key", "server.pem", "server.key"))

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(
        "req",
        "-x509",
        *curve,
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        "/CN=gpu-airgap test CA",
    )
    csr = directory / "server.csr"
    openssl("req", *curve, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = directory / "server.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    return ca, cert, key


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def libtrust_kid(public_key: ec.EllipticCurvePublicKey) -> str:
    """The key id distribution matches a JWT's ``kid`` against: base32 of the SPKI's sha256, 240 bits, in groups of 4."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    text = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode()
    return ":".join(text[i : i + 4] for i in range(0, len(text), 4))


@dataclass
class TokenServer:
    """A token service for the registry's ``auth: token``; records what it was asked."""

    workdir: Path
    users: Dict[str, str]
    refresh_tokens: Dict[str, str] = field(default_factory=dict)  #: identity token -> user
    requests: List[Dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .sign(self._key, hashes.SHA256())
        )
        self.certificate = self.workdir / "token-cert.pem"
        self.certificate.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._kid = libtrust_kid(self._key.public_key())
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                user = server._basic_user(self.headers.get("Authorization", ""))
                server.requests.append({"method": "GET", "user": user or "", **query})
                self._answer(user, query)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                server.requests.append(
                    {"method": "POST", **{k: v for k, v in form.items() if k != "refresh_token"}}
                )
                user = (
                    server.refresh_tokens.get(form.get("refresh_token", ""))
                    if form.get("grant_type") == "refresh_token"
                    else None
                )
                self._answer(user, form)

            def _answer(self, user: Optional[str], params: Dict[str, str]) -> None:
                if user is None:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps(
                    {"token": server.issue(user, params.get("scope", "")), "expires_in": 300}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self._httpd.server_address[1]}/token"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _basic_user(self, header: str) -> Optional[str]:
        """The authenticated user; "" for an anonymous request; None for wrong credentials."""
        if not header:
            return ""
        try:
            user, _, password = base64.b64decode(header.split(" ", 1)[1]).decode().partition(":")
        except (IndexError, ValueError):
            return None
        return user if self.users.get(user) == password else None

    def issue(self, user: str, scope: str) -> str:
        """An ES256 JWT granting ``user`` the scope's actions (nothing when anonymous)."""
        access = []
        if user and scope.startswith("repository:"):
            _, name, actions = scope.split(":", 2)
            access.append({"type": "repository", "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "kid": self._kid}
        claims = {
            "iss": ISSUER,
            "sub": user,
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": os.urandom(8).hex(),
            "access": access,
        }
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def registry_auth(self) -> Dict[str, Any]:
        """The registry's ``auth`` section for this token service."""
        return {
            "token": {
                "realm": self.realm,
                "service": SERVICE,
                "issuer": ISSUER,
                "rootcertbundle": str(self.certificate),
            }
        }

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@dataclass(frozen=True)
class DockerConfig:
    """A ``$DOCKER_CONFIG`` directory with one registry's credentials."""

    directory: Path

    @classmethod
    def write(cls, directory: Path, host: str, entry: Dict[str, str]) -> DockerConfig:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps({"auths": {host: entry}}))
        return cls(directory)


def basic_entry(user: str, password: str) -> Dict[str, str]:
    """A config.json ``auths`` entry as ``docker login`` writes it for basic credentials."""
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


@contextmanager
def registry_with_login(
    work: Path, user: str = "ops", password: str = "s3cret"
) -> Iterator[Tuple[Registry, DockerConfig]]:
    """A running registry that wants ``user``/``password`` (htpasswd), and a ``$DOCKER_CONFIG`` holding that login."""
    users = htpasswd_file(work / "htpasswd", {user: password})
    with Registry(
        work / "registry", auth={"htpasswd": {"realm": "gpu-airgap-test", "path": str(users)}}
    ) as registry:
        yield registry, DockerConfig.write(work / "docker", registry.host, basic_entry(user, password))


def running(registry: Registry) -> Iterator[Registry]:
    """Yield ``registry`` started; stop it afterwards (for fixtures)."""
    with registry:
        yield registry
