"""What travels between the registry client and a registry, as pure helpers over streams and URLs.

- :class:`Response` is one answer; :meth:`Response.read_small` reads a body that must stay small.
- :func:`arriving` yields a body as it arrives, each block counted by a
  :class:`~plumbing.rate.RateFloor` (``--min-rate``), and :func:`copy_checked` streams a blob
  through it into a file, refusing too many or too few bytes or another sha256.
- :func:`check_redirect` refuses a redirect that is not http(s) or leaves https for plain http;
  :func:`origin` is what credentials stay within.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from email.message import Message
from typing import IO, Dict, Iterator, List, Tuple

from installer.oci.errors import DigestMismatch, RegistryError
from plumbing import rate

CHUNK = 1 << 20
MAX_SMALL_BODY = 4 << 20  #: manifests, token and error bodies


@dataclass
class Response:
    """One answer of a registry: its status, headers, body (still to read) and the URL that gave it."""

    status: int
    headers: Message
    body: IO[bytes]
    url: str

    def read_small(self, what: str, floor: rate.RateFloor) -> bytes:
        """Read a body that must stay small (a manifest, a token, an error document) at ``floor``'s pace at least."""
        with self.body:
            data = b"".join(arriving(self.body, MAX_SMALL_BODY, floor))
        if len(data) > MAX_SMALL_BODY:
            raise RegistryError(f"{what} is larger than {MAX_SMALL_BODY} bytes; refusing it")
        return data

    def close(self) -> None:
        self.body.close()


def origin(url: str) -> Tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.netloc


def check_redirect(host: str, source: str, location: str) -> None:
    """Refuse a redirect (or an upload ``Location``) that is not http(s), or that leaves https for plain http.

    :raises RegistryError: naming where the registry wanted to send us and why we do not go.
    """
    scheme = urllib.parse.urlsplit(location).scheme
    if scheme not in ("http", "https"):
        raise RegistryError(
            f"{host} redirected to {location!r}; refusing it: only http and https redirects are followed"
        )
    if scheme == "http" and urllib.parse.urlsplit(source).scheme == "https":
        raise RegistryError(
            f"{host} redirected from https to plain http ({location}); refusing to downgrade the connection"
        )


def arriving(body: IO[bytes], limit: int, floor: rate.RateFloor) -> Iterator[bytes]:
    """``body``'s bytes as they arrive, at most ``limit`` + 1 of them, each block counted by ``floor``.

    ``read1`` returns whatever came (``read`` would wait for a whole block), so a body that
    drips is seen dripping and stopped by the floor.
    """
    read = getattr(body, "read1", body.read)
    got = 0
    while got <= limit:
        block = read(min(CHUNK, limit + 1 - got))
        if not block:
            return
        got += len(block)
        floor.arrived(len(block))
        yield block


def copy_checked(
    source: IO[bytes], out: IO[bytes], digest: str, size: int, where: str, floor: rate.RateFloor
) -> None:
    hasher = hashlib.sha256()
    count = 0
    for block in arriving(source, size, floor):
        count += len(block)
        if count > size:
            raise DigestMismatch(f"{where} runs past the {size} bytes its manifest gives; refusing it")
        hasher.update(block)
        out.write(block)
    actual = "sha256:" + hasher.hexdigest()
    if count != size:
        raise DigestMismatch(f"{where} ended after {count} of its {size} bytes")
    if actual != digest:
        raise DigestMismatch(
            f"{where} does not match its digest (got {actual}): the registry served altered or corrupt data"
        )


def error_detail(data: bytes) -> str:
    """``: CODE: message`` from a distribution error document, if there is one."""
    try:
        errors: List[Dict[str, object]] = json.loads(data).get("errors") or []
    except (ValueError, AttributeError):
        return ""
    if not errors or not isinstance(errors[0], dict):
        return ""
    return f": {errors[0].get('code', '')}: {errors[0].get('message', '')}"
