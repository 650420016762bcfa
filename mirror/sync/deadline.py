"""The mirror's HTTP adapter: every answer's status line and headers arrive within a deadline.

``requests``' timeout is per read, and the ``--min-rate`` floor watches bodies; a server (or a
middlebox) dripping its headers a byte at a time would hold a download forever. This adapter
gives urllib3 connection classes whose ``getresponse`` is held to ``header_deadline`` seconds by
:func:`plumbing.rate.with_header_deadline`; the cut is a timeout, which the Downloader retries like any.
"""

from __future__ import annotations

from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from plumbing.rate import with_header_deadline


class DeadlineAdapter(HTTPAdapter):
    """An :class:`HTTPAdapter` whose connections must deliver their headers within ``header_deadline`` seconds."""

    def __init__(self, header_deadline: float, **kwargs: Any) -> None:
        self.header_deadline = header_deadline  # before super().__init__, which builds the pool manager
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        seconds = self.header_deadline
        self.poolmanager.pool_classes_by_scheme = {
            "http": _pool(HTTPConnectionPool, with_header_deadline(HTTPConnection, seconds)),
            "https": _pool(HTTPSConnectionPool, with_header_deadline(HTTPSConnection, seconds)),
        }


def _pool(base: type[HTTPConnectionPool], connection: type[HTTPConnection]) -> type[HTTPConnectionPool]:
    return type(f"Deadline{base.__name__}", (base,), {"ConnectionCls": connection})
