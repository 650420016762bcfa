"""urllib handlers whose connections give an answer's status line and headers a deadline.

The socket timeout (``RegistryAccess.timeout``) only fires when nothing arrives for that long,
and the ``--min-rate`` floor (:mod:`plumbing.rate`) watches bodies; a server that drips its
status line and headers a byte at a time would slip between both. Here a timer shuts the
connection's socket down when the headers are not complete in time, and the reader's failure
becomes a :class:`TimeoutError` (an ``OSError``: the client retries it as any network failure).
"""

from __future__ import annotations

import functools
import http.client
import ssl
import urllib.request
from typing import Any, Callable, List

from plumbing import rate


def handlers(context: ssl.SSLContext, seconds: float) -> List[urllib.request.BaseHandler]:
    """An http and an https handler (``context`` for TLS) whose answers must start within ``seconds``."""
    return [_HTTPHandler(seconds), _HTTPSHandler(seconds, context)]


def _deadlined(base: Callable[..., http.client.HTTPConnection], seconds: float) -> Callable[..., Any]:
    """``base``'s connections, each with its ``getresponse`` held to ``seconds``."""

    def connect(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        connection = base(*args, **kwargs)
        read_headers = connection.getresponse
        bounded = functools.partial(rate.headers_within, seconds, lambda: connection.sock, read_headers)
        setattr(connection, "getresponse", bounded)  # noqa: B010 - mypy refuses assigning to a method
        return connection

    return connect


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._seconds = seconds

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_deadlined(http.client.HTTPConnection, self._seconds), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, seconds: float, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._seconds = seconds
        self._tls = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_deadlined(http.client.HTTPSConnection, self._seconds), req, context=self._tls)
