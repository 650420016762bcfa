"""The one module that speaks HTTP to OCI registries (distribution API v2), standard library only.

:class:`RegistryClient` does the registry dance the way Docker's client does:

- **Auth.** A request goes out anonymously (or with what an earlier challenge taught us). On
  ``401`` the challenge goes to :class:`~installer.oci.auth.Authorizer` (basic, or a bearer token
  from the realm, which this module fetches) and the request is retried once; an expired token is
  simply replaced at its next ``401``.
- **TLS.** ``https`` with the system's CAs plus ``--ca-file``. Plain ``http`` only when asked
  (``plain_http``) or for a loopback registry that does not speak TLS (a handshake that fails for
  any reason other than certificate verification). A certificate that does not verify is never
  retried over plain http.
- **Redirects** (blob storage behind S3 and the like) are followed by hand: only to ``http`` or
  ``https``, never from ``https`` down to ``http`` (credentials or a blob would then travel in
  clear text), and dropping the ``Authorization`` header when they leave the registry's origin
  (scheme, host and port).
- **Retries.** Reads (``GET``/``HEAD``) are retried on connection failures and 502/503/504.
- **Integrity.** :meth:`RegistryClient.fetch_blob` streams a blob into a file, counting and
  hashing as it goes, and refuses it as soon as it runs past its size or at the end if its sha256
  differs; :meth:`RegistryClient.get_manifest` does the same for the manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Dict, Iterator, Optional, Sequence, Tuple

from installer.oci import deadline
from installer.oci.auth import Authorizer, TokenRequest
from installer.oci.credentials import Credentials, parse_challenge
from installer.oci.errors import (
    DigestMismatch,
    RegistryAuthError,
    RegistryError,
    RegistryNotFound,
    RegistryUnreachable,
)
from installer.oci.reference import DIGEST_RE, Reference
from installer.oci.wire import Response, check_redirect, copy_checked, error_detail, origin
from plumbing import clock, output, rate
from plumbing.version import VERSION

_RETRY_STATUS = (502, 503, 504)
_MAX_REDIRECTS = 5
BodyFactory = Callable[[], IO[bytes]]


@dataclass(frozen=True)
class RegistryAccess:
    """How to reach a registry: who we are and which transport we accept."""

    credentials: Optional[Credentials] = None
    ca_file: Optional[Path] = None  #: a PEM bundle trusted in addition to the system's CAs
    plain_http: bool = False  #: speak plain http to this registry (any host)
    timeout: float = 60.0  #: seconds per connection attempt and per read
    attempts: int = 3  #: tries for reads before a network failure is reported
    min_rate: float = rate.DEFAULT_MIN_RATE  #: bytes/s a body must keep up over a window (0: no floor)
    header_deadline: float = 60.0  #: seconds an answer's status line and headers may take in all


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Hand 3xx answers back to us: we decide whether the Authorization header follows."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class RegistryClient:
    """Talk to the registry at ``host`` (``name[:port]``); one per registry and command."""

    def __init__(
        self,
        host: str,
        access: RegistryAccess,
        *,
        loopback: bool = False,
        sleep: Optional[Callable[[float], None]] = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self._now = now  #: the clock of the --min-rate floor under every body read
        self.access = access
        self._scheme = "http" if access.plain_http else "https"
        self._may_fall_back = loopback and not access.plain_http  #: until the first answer
        self._sleep = sleep  #: None: plumbing.clock.backoff, looked up at each wait (tests swap it)
        self._auth = Authorizer(
            host, access.credentials, self._send_token_request, plain_http=lambda: access.plain_http
        )
        context = ssl.create_default_context()
        if access.ca_file is not None:
            try:
                context.load_verify_locations(cafile=str(access.ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise RegistryError(f"cannot load the CA file {access.ca_file}: {exc}") from exc
        self._opener = urllib.request.build_opener(
            *deadline.handlers(context, access.header_deadline), _NoRedirects()
        )

    @classmethod
    def for_reference(cls, ref: Reference, access: RegistryAccess) -> RegistryClient:
        """A client for the registry ``ref`` lives in."""
        return cls(ref.host, access, loopback=ref.is_loopback)

    # -- the API calls ---------------------------------------------------------------------------

    def get_manifest(self, ref: Reference, media_types: Sequence[str]) -> Tuple[bytes, str]:
        """Fetch ``ref``'s manifest; return its exact bytes and their digest.

        A tag is resolved here, once; a digest reference must hash to itself.

        :raises DigestMismatch: the bytes do not match the requested digest or the registry's own header.
        """
        path = f"/v2/{ref.repository}/manifests/{ref.reference}"
        resp = self._request(
            "GET", path, ref.repository, ("pull",), headers={"Accept": ", ".join(media_types)}
        )
        if resp.status == 404:
            resp.close()
            raise RegistryNotFound(
                f"{ref} does not exist in the registry (no such repository, tag or digest)"
            )
        self._expect(resp, (200,), f"fetching the manifest of {ref}")
        data = self._read_small(resp, f"the manifest of {ref}")
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        claimed = resp.headers.get("Docker-Content-Digest")
        for expected in (ref.digest, claimed if claimed and DIGEST_RE.match(claimed) else None):
            if expected is not None and expected != digest:
                raise DigestMismatch(
                    f"the manifest of {ref} does not match its digest {expected} (got {digest})"
                )
        return data, digest

    def blob_exists(self, repository: str, digest: str) -> bool:
        """True when the registry already has the blob (a push can skip it)."""
        resp = self._request("HEAD", f"/v2/{repository}/blobs/{digest}", repository, ("pull",))
        resp.close()
        return resp.status == 200

    def fetch_blob(self, repository: str, digest: str, size: int, dest: Path) -> None:
        """Stream blob ``digest`` into the new file ``dest``, checking its size and sha256 on the way.

        :raises DigestMismatch: too many or too few bytes, or another sha256 (``dest`` is removed).
        """
        where = f"blob {digest} of {self.host}/{repository}"
        for attempt in range(1, self.access.attempts + 1):
            resp = self._follow("GET", f"/v2/{repository}/blobs/{digest}", repository)
            if resp.status == 404:
                resp.close()
                raise RegistryNotFound(f"{where} is missing from the registry")
            self._expect(resp, (200,), f"fetching {where}")
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) != size:
                resp.close()
                raise DigestMismatch(f"{where} is {length} bytes, its manifest says {size}")
            try:
                with resp.body, open(dest, "wb") as out:
                    copy_checked(resp.body, out, digest, size, where, self._floor(where))
                return
            except (DigestMismatch, rate.TransferTooSlow):
                dest.unlink()
                raise
            except (OSError, http.client.HTTPException) as exc:  # the connection broke mid-blob
                if attempt == self.access.attempts:
                    raise RegistryUnreachable(
                        f"{where} could not be downloaded from {self.host}: {_reason(exc)}"
                    ) from exc
                self._wait(0.5 * attempt)
        raise AssertionError("unreachable")

    def upload_blob(self, repository: str, digest: str, size: int, open_body: BodyFactory) -> bool:
        """Upload a blob unless the registry has it; True when bytes were sent.

        A monolithic upload: ``POST …/blobs/uploads/`` then one ``PUT`` of the whole blob.
        """
        if self.blob_exists(repository, digest):
            return False
        start = self._request("POST", f"/v2/{repository}/blobs/uploads/", repository, ("pull", "push"))
        self._expect(start, (202,), f"starting the upload of {digest} to {repository}")
        start.close()
        location = start.headers.get("Location")
        if not location:
            raise RegistryError(
                f"{self.host} started an upload without telling where to send it (no Location header)"
            )
        url = urllib.parse.urljoin(start.url, location)
        check_redirect(self.host, start.url, url)  # the Location is where our credentials would go next
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"digest": digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if origin(url) == origin(start.url):
            done = self._request("PUT", url, repository, ("pull", "push"), headers=headers, body=open_body)
        else:  # upload storage elsewhere: the URL carries its own authorization, our credentials stay home
            done = self._exchange("PUT", url, headers, open_body)
        self._expect(done, (201,), f"uploading {digest} to {repository}")
        done.close()
        return True

    def put_manifest(self, ref: Reference, data: bytes, media_type: str) -> str:
        """Store ``data`` as ``ref``'s manifest; return its digest (checked against the registry's answer)."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = f"/v2/{ref.repository}/manifests/{ref.reference}"
        resp = self._request(
            "PUT",
            path,
            ref.repository,
            ("pull", "push"),
            headers={"Content-Type": media_type, "Content-Length": str(len(data))},
            body=lambda: io.BytesIO(data),
        )
        self._expect(resp, (201,), f"storing the manifest of {ref}")
        resp.close()
        claimed = resp.headers.get("Docker-Content-Digest")
        if claimed and claimed != digest:
            raise DigestMismatch(
                f"{self.host} stored the manifest of {ref} as {claimed}, but its bytes are {digest}"
            )
        return digest

    # -- auth ------------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        target: str,
        repository: str,
        actions: Tuple[str, ...],
        *,
        headers: Optional[Dict[str, str]] = None,
        body: Optional[BodyFactory] = None,
    ) -> Response:
        """One API call with the auth dance: at most one retry after a ``401`` taught us how to authenticate."""
        for round_ in range(2):
            sent = dict(headers or {})
            authorization = self._auth.header(repository, actions)
            if authorization:
                sent["Authorization"] = authorization
            resp = self._exchange(method, target, sent, body)
            if resp.status == 403:
                resp.close()
                raise RegistryAuthError(
                    f"{self.host} denied {self._auth.who()} {'/'.join(actions)} access to {repository} (HTTP 403)"
                )
            if resp.status != 401:
                return resp
            resp.close()
            if round_ == 1:
                break
            self._auth.learn(parse_challenge(resp.headers.get("WWW-Authenticate", "")), repository, actions)
        raise self._auth.refused(repository)

    def _send_token_request(self, request: TokenRequest) -> Tuple[int, bytes]:
        body = request.body
        resp = self._exchange(
            request.method,
            request.url,
            request.headers,
            (lambda: io.BytesIO(body)) if body is not None else None,
        )
        return resp.status, self._read_small(
            resp, f"the answer of the token service {request.url.split('?', 1)[0]}"
        )

    # -- transport -------------------------------------------------------------------------------

    def _follow(self, method: str, target: str, repository: str) -> Response:
        """A read that may be redirected to blob storage; credentials stay with the registry's host."""
        resp = self._request(method, target, repository, ("pull",))
        for _ in range(_MAX_REDIRECTS):
            if resp.status not in (301, 302, 303, 307, 308):
                return resp
            resp.close()
            location = urllib.parse.urljoin(resp.url, resp.headers.get("Location", ""))
            check_redirect(self.host, resp.url, location)
            if origin(location) == origin(resp.url):
                resp = self._request(method, location, repository, ("pull",))
            else:
                resp = self._exchange(method, location, {}, None)
        raise RegistryError(f"{self.host} redirected {target} more than {_MAX_REDIRECTS} times")

    def _url(self, target: str) -> str:
        return target if "://" in target else f"{self._scheme}://{self.host}{target}"

    def _exchange(
        self, method: str, target: str, headers: Dict[str, str], body: Optional[BodyFactory]
    ) -> Response:
        """One request, retried when it is a read and the network or a proxy failed; HTTP errors are answers."""
        idempotent = method in ("GET", "HEAD")
        attempt = 0
        while True:
            attempt += 1
            url = self._url(target)
            try:
                with _opened(body) as data:
                    resp = self._send(method, url, headers, data)
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, ssl.SSLCertVerificationError):
                    raise RegistryUnreachable(
                        f"the TLS certificate of {self.host} is not trusted ({reason.verify_message}); pass its CA with --ca-file"
                    ) from exc
                if isinstance(reason, ssl.SSLError) and self._may_fall_back and "://" not in target:
                    self._scheme, self._may_fall_back = "http", False  # a loopback registry without TLS
                    attempt -= 1
                    continue
                if not idempotent or attempt >= self.access.attempts:
                    raise RegistryUnreachable(f"cannot reach the registry at {url}: {_reason(exc)}") from exc
                output.warn(
                    f"cannot reach {url} ({_reason(exc)}); retry {attempt} of {self.access.attempts - 1} in {0.5 * attempt:.1f} s"
                )
                self._wait(0.5 * attempt)
                continue
            self._may_fall_back = False
            if resp.status in _RETRY_STATUS and idempotent and attempt < self.access.attempts:
                resp.close()
                output.warn(
                    f"{method} {url}: HTTP {resp.status}; retry {attempt} of {self.access.attempts - 1} in {0.5 * attempt:.1f} s"
                )
                self._wait(0.5 * attempt)
                continue
            if resp.status in _RETRY_STATUS or resp.status >= 500:
                resp.close()
                raise RegistryUnreachable(
                    f"the registry at {self.host} failed with HTTP {resp.status} for {method} {url}"
                )
            return resp

    def _send(self, method: str, url: str, headers: Dict[str, str], data: Optional[IO[bytes]]) -> Response:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):  # urllib would open file:// too
            raise RegistryError(
                f"refusing to request {url} for {self.host}: only http and https URLs are used"
            )
        request = urllib.request.Request(
            url, data=data, method=method, headers={"User-Agent": f"gpu-airgap/{VERSION}", **headers}
        )
        try:
            raw = self._opener.open(request, timeout=self.access.timeout)
        except urllib.error.HTTPError as exc:  # an answer, not a failure: the caller decides
            return Response(exc.code, exc.headers, exc, url)
        return Response(raw.status, raw.headers, raw, url)

    def _wait(self, seconds: float) -> None:
        """Wait before another attempt."""
        (self._sleep or clock.backoff)(seconds)

    def _floor(self, what: str) -> rate.RateFloor:
        return rate.RateFloor(what, self.access.min_rate, clock=self._now)

    def _read_small(self, resp: Response, what: str) -> bytes:
        return resp.read_small(what, self._floor(what))

    def _expect(self, resp: Response, ok: Tuple[int, ...], doing: str) -> None:
        if resp.status in ok:
            return
        detail = error_detail(self._read_small(resp, "an error document"))
        raise RegistryError(f"{self.host} failed {doing} with HTTP {resp.status}{detail}")


@contextlib.contextmanager
def _opened(body: Optional[BodyFactory]) -> Iterator[Optional[IO[bytes]]]:
    if body is None:
        yield None
        return
    stream = body()
    try:
        yield stream
    finally:
        stream.close()


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
    return str(reason) or type(exc).__name__
