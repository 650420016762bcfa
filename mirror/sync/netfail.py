"""Why a request failed, as a clause a user can act on, and whether another attempt can help.

requests wraps urllib3, which wraps the socket error: ``ConnectionError(MaxRetryError(
NameResolutionError(gaierror)))``. Their ``str()`` repeats the URL and nests parentheses, so the
message is built here from the innermost cause that says what happened, never from those texts.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import requests
import urllib3

#: Added to connection failures: the two things a user can change.
CONNECTION_HINT: Final = (
    "check --upstream, and set https_proxy (or http_proxy) if this host reaches the internet through a proxy"
)
_DNS_ERRORS: Final = {
    getattr(socket, name)
    for name in ("EAI_NONAME", "EAI_AGAIN", "EAI_FAIL", "EAI_NODATA", "EAI_ADDRFAMILY")
    if hasattr(socket, name)
}
_UNREACHABLE: Final = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL}
_DROPPED: Final = (
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.IncompleteRead,
    requests.exceptions.ChunkedEncodingError,
    ConnectionResetError,
    BrokenPipeError,
)


@dataclass(frozen=True)
class Failure:
    """One failed attempt: what happened, and whether to try again."""

    reason: str  #: a clause: "the host name nvidia.invalid does not resolve"
    retry: bool  #: another attempt may succeed (a refused or dropped connection, a timeout)


def describe(exc: BaseException, url: str) -> Failure:
    """Classify ``exc`` (raised by requests while fetching ``url``) by the most telling cause it wraps."""
    parts = urlsplit(url)
    host = parts.hostname or url
    where = f"{host}:{parts.port}" if parts.port else host
    chain = list(_causes(exc))
    for matches, failure in _kinds(host, where):
        if any(matches(cause) for cause in chain):
            return failure
    return Failure(f"the connection to {where} failed ({type(exc).__name__})", retry=True)


def _kinds(host: str, where: str) -> list[tuple[Callable[[BaseException], bool], Failure]]:
    """(does this cause say it, what it means), most telling first."""
    return [
        # Not retried: a resolver that has no answer now will not have one half a second later.
        (_unresolved, Failure(f"the host name {host} does not resolve", retry=False)),
        (
            lambda c: isinstance(c, (requests.exceptions.ProxyError, urllib3.exceptions.ProxyError)),
            Failure(
                "the proxy (https_proxy / http_proxy) could not be reached or refused the request", retry=True
            ),
        ),
        (
            lambda c: isinstance(c, (requests.exceptions.SSLError, urllib3.exceptions.SSLError)),
            Failure(
                f"the TLS connection to {host} failed (is its certificate trusted on this host?)", retry=False
            ),
        ),
        (
            lambda c: isinstance(c, ConnectionRefusedError),
            Failure(f"{where} refused the connection", retry=True),
        ),
        (
            lambda c: isinstance(c, OSError) and c.errno in _UNREACHABLE,
            Failure(f"{where} is unreachable from this host", retry=True),
        ),
        (
            # urllib3's NewConnectionError subclasses ConnectTimeoutError: only a real timeout counts.
            lambda c: (
                isinstance(c, (requests.exceptions.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError))
                and not isinstance(c, urllib3.exceptions.NewConnectionError)
            ),
            Failure(f"connecting to {where} timed out", retry=True),
        ),
        (
            lambda c: isinstance(
                c, (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError, TimeoutError)
            ),
            Failure(f"{where} stopped sending data (read timeout)", retry=True),
        ),
        (
            lambda c: isinstance(c, _DROPPED),
            Failure(f"the connection to {where} dropped before the end of the file", retry=True),
        ),
    ]


def _unresolved(cause: BaseException) -> bool:
    if isinstance(cause, socket.gaierror):
        return cause.errno in _DNS_ERRORS
    return isinstance(cause, urllib3.exceptions.NameResolutionError)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: ``reason`` (urllib3), the first argument (requests), ``__cause__``/``__context__``."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        reason = getattr(current, "reason", None)
        first = current.args[0] if current.args else None
        todo += [
            c for c in (reason, first, current.__cause__, current.__context__) if isinstance(c, BaseException)
        ]
