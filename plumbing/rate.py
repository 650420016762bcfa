"""A floor under a download's speed, so a stalled transfer fails instead of running for weeks.

A socket timeout only fires when nothing at all arrives; a server (or a middlebox) that drips one
byte every few seconds keeps every read alive forever. :class:`RateFloor` is told the bytes as
they arrive and, once per ``window`` seconds, compares what came in that window with
``min_rate``: below it, the transfer is abandoned with :class:`TransferTooSlow` (exit 4, like any
download that failed). The clock is passed in, so tests drive it without waiting.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from typing import Any, Callable, Optional, Protocol, Type, TypeVar, cast

from plumbing.errors import ExitCode, ToolError


class _Closable(Protocol):
    def close(self) -> None: ...


_R = TypeVar("_R", bound=_Closable)
_C = TypeVar("_C", bound=http.client.HTTPConnection)

#: bytes per second a download must keep up, averaged over :data:`WINDOW` (``--min-rate``; 0: no floor)
DEFAULT_MIN_RATE = 1024
#: seconds over which the rate is averaged: long enough for a congested link to recover
WINDOW = 60.0


class TransferTooSlow(ToolError):
    """A download ran below ``--min-rate`` for a whole window."""

    exit_code = ExitCode.NETWORK


class RateFloor:
    """Watch one transfer of ``what``; :meth:`arrived` raises once a window stays below ``min_rate``."""

    def __init__(
        self,
        what: str,
        min_rate: float = DEFAULT_MIN_RATE,
        *,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.min_rate = min_rate
        self.window = window
        self._clock = clock
        self._since = clock()
        self._bytes = 0

    def arrived(self, nbytes: int) -> None:
        """Count ``nbytes`` more; at the end of each window check the rate over it.

        :raises TransferTooSlow: naming the transfer, the rate it kept and the floor.
        """
        if self.min_rate <= 0:
            return
        self._bytes += nbytes
        now = self._clock()
        elapsed = now - self._since
        if elapsed < self.window:
            return
        rate = self._bytes / elapsed
        if rate < self.min_rate:
            raise TransferTooSlow(
                f"{self.what} arrived at {rate:.1f} bytes/s over the last {elapsed:.0f} s, below the "
                f"--min-rate of {self.min_rate:g} bytes/s; the server or the network is stalling "
                "(pass a lower --min-rate, or 0, for a slow link)"
            )
        self._since, self._bytes = now, 0


def headers_within(
    seconds: float,
    sock: Callable[[], Optional[socket.socket]],
    read_headers: Callable[[], _R],
) -> _R:
    """``read_headers()`` (an HTTP client's ``getresponse``), cut off after ``seconds`` by shutting ``sock()`` down.

    The socket timeout fires only when nothing arrives for that long, so a server dripping its
    status line and headers a byte at a time would hold a request forever.

    :raises TimeoutError: the headers were not complete in time (an ``OSError``: retried like any network failure).
    """
    fired = threading.Event()

    def give_up() -> None:
        fired.set()
        current = sock()
        if current is not None:
            with contextlib.suppress(OSError):
                current.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()
    late = f"no complete status line and headers within {seconds:g} s"
    try:
        response = read_headers()
    except Exception as exc:  # whatever the cut made the HTTP client raise
        if fired.is_set():
            raise TimeoutError(late) from exc
        raise
    finally:
        timer.cancel()
    if fired.is_set():  # the cut connection read as the end of the headers: they are not the server's
        response.close()
        raise TimeoutError(late)
    return response


def with_header_deadline(base: Type[_C], seconds: float) -> Type[_C]:
    """A subclass of the connection class ``base`` whose ``getresponse`` is held to ``seconds`` (:func:`headers_within`).

    ``base`` is ``http.client``'s connection (the registry client's urllib) or urllib3's, which
    derives from it (the mirror's requests).
    """

    def getresponse(self: Any) -> Any:
        return headers_within(seconds, lambda: self.sock, lambda: base.getresponse(self))

    return cast(Type[_C], type(f"Deadline{base.__name__}", (base,), {"getresponse": getresponse}))
