"""urllib handlers whose connections give an answer's status line and headers a deadline.

The socket timeout (``RegistryAccess.timeout``) only fires when nothing arrives for that long,
and the ``--min-rate`` floor (:mod:`plumbing.rate`) watches bodies; a server that drips its
status line and headers a byte at a time would slip between both. Here each connection is of a
class from :func:`plumbing.rate.with_header_deadline`: a timer shuts its socket down when the
headers are not complete in time, and the reader's failure becomes a :class:`TimeoutError` (an
``OSError``: the client retries it as any network failure).
"""

from __future__ import annotations

import http.client
import ssl
import urllib.request
from typing import List

from plumbing import rate


def handlers(context: ssl.SSLContext, seconds: float) -> List[urllib.request.BaseHandler]:
    """An http and an https handler (``context`` for TLS) whose answers must start within ``seconds``."""
    return [_HTTPHandler(seconds), _HTTPSHandler(seconds, context)]


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._connection = rate.with_header_deadline(http.client.HTTPConnection, seconds)

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, seconds: float, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._connection = rate.with_header_deadline(http.client.HTTPSConnection, seconds)
        self._tls = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req, context=self._tls)
