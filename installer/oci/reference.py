"""Parse ``oci://HOST[:PORT]/REPO:TAG`` and ``oci://HOST[:PORT]/REPO@sha256:HEX`` (pure).

The grammar is the distribution spec's: a repository is lowercase path components joined by
``/``; a tag is up to 128 word characters, dots and dashes; a digest here is always sha256 (the
only algorithm we check). A reference must name a tag or a digest: a node never installs an
implicit ``latest``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Optional

from installer.oci import SCHEME
from plumbing.errors import UsageError

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_HOST_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::[0-9]{1,5})?$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class Reference:
    """One artifact in one registry: ``host`` (with its port), ``repository``, and a tag or digest."""

    host: str
    repository: str
    tag: Optional[str] = None
    digest: Optional[str] = None

    @property
    def hostname(self) -> str:
        """The host without its port (and without IPv6 brackets)."""
        host = self.host
        if host.startswith("["):
            return host[1 : host.index("]")]
        return host.rsplit(":", 1)[0] if ":" in host else host

    @property
    def is_loopback(self) -> bool:
        """True for ``localhost``, 127.0.0.0/8 and ``::1``: the only hosts plain http is used for unasked."""
        return is_loopback_host(self.hostname)

    @property
    def reference(self) -> str:
        """What goes after ``/manifests/``: the digest when known, else the tag."""
        return self.digest or self.tag or ""

    def pinned(self, digest: str) -> Reference:
        """The same artifact named by its manifest digest (what a node should be given)."""
        return Reference(self.host, self.repository, None, digest)

    def __str__(self) -> str:
        suffix = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{SCHEME}{self.host}/{self.repository}{suffix}"


def parse_reference(text: str) -> Reference:
    """Parse ``oci://HOST[:PORT]/REPO:TAG`` or ``…/REPO@sha256:HEX``.

    :raises UsageError: naming what is wrong with ``text``.
    """
    if not text.startswith(SCHEME):
        raise UsageError(f"{text!r} is not a registry reference; write oci://HOST[:PORT]/REPOSITORY:TAG")
    rest = text[len(SCHEME) :]
    host, slash, path = rest.partition("/")
    if not slash or not _HOST_RE.match(host) or not _port_ok(host):
        raise UsageError(f"{text!r} does not start with a registry host (oci://HOST[:PORT]/REPOSITORY:TAG)")
    digest: Optional[str] = None
    tag: Optional[str] = None
    if "@" in path:
        path, _, digest = path.partition("@")
        if not DIGEST_RE.match(digest):
            raise UsageError(f"{text!r} has a malformed digest; write @sha256: and 64 lowercase hex digits")
    else:
        last = path.rsplit("/", 1)[-1]
        if ":" in last:
            path, _, tag = path.rpartition(":")
            if not _TAG_RE.match(tag):
                raise UsageError(
                    f"{text!r} has a malformed tag {tag!r}; use letters, digits, '_', '.', '-' (128 at most)"
                )
    if not _REPOSITORY_RE.match(path) or len(path) > 255:
        raise UsageError(
            f"{text!r} has a malformed repository {path!r}; use lowercase path components like team/nvct"
        )
    if tag is None and digest is None:
        raise UsageError(
            f"{text!r} names no tag or digest; add :TAG or @sha256:DIGEST (there is no implicit latest)"
        )
    return Reference(host, path, tag, digest)


def _port_ok(host: str) -> bool:
    port = host.rsplit(":", 1)[1] if ":" in host and not host.endswith("]") else None
    return port is None or 0 < int(port) < 65536


def is_loopback_host(hostname: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1`` (a bare host name, no port or brackets)."""
    name = hostname.lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
