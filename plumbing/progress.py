"""A byte meter for long steps (bundle build and verify, publish, install): one redrawn line on a terminal.

Libraries take a :class:`Meter` and call ``start``/``advance``/``close``; the command line picks the
real one with :func:`terminal_meter`, which draws only when stderr is a terminal (logs, pipes and
``--json`` callers see nothing from it). It needs nothing beyond the standard library, so the node
zipapp (which ships without rich) draws the same line as the connected host.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Optional, Protocol, TextIO


class Meter(Protocol):
    """What a long step reports: the total once, bytes as they pass, and the end."""

    def start(self, total: int) -> None:
        """The step will handle ``total`` bytes."""

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more were handled."""

    def close(self) -> None:
        """The step ended (done or failed)."""


class NoMeter:
    """Shows nothing."""

    def start(self, total: int) -> None:
        """Ignore."""

    def advance(self, nbytes: int) -> None:
        """Ignore."""

    def close(self) -> None:
        """Ignore."""


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.1f} MiB"


class TerminalMeter:
    """``LABEL: 42% (12.3 of 29.0 MiB)`` on one line of ``stream``, redrawn at most every ``every`` seconds."""

    def __init__(
        self, label: str, stream: TextIO, *, every: float = 0.1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.label = label
        self.stream = stream
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()  # the bundle writer's worker thread advances too
        self._total = 0
        self._done = 0
        self._last = float("-inf")
        self._drawn = False

    def start(self, total: int) -> None:
        """Remember the total and draw 0%."""
        with self._lock:
            self._total, self._done = max(total, 0), 0
            self._draw(force=True)

    def advance(self, nbytes: int) -> None:
        """Count ``nbytes`` and redraw when the last drawing is old enough."""
        with self._lock:
            self._done += nbytes
            self._draw(force=False)

    def close(self) -> None:
        """Draw the final state and end the line."""
        with self._lock:
            if self._drawn:
                self._draw(force=True)
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = False

    def _draw(self, *, force: bool) -> None:
        now = self.clock()
        if not force and now - self._last < self.every:
            return
        self._last = now
        done = min(self._done, self._total) if self._total else self._done
        percent = f"{100 * done // self._total:3d}% " if self._total else ""
        self.stream.write(f"\r{self.label}: {percent}({done / (1 << 20):.1f} of {_mib(self._total)})\x1b[K")
        self.stream.flush()
        self._drawn = True


def terminal_meter(label: str, *, quiet: bool = False, stream: Optional[TextIO] = None) -> Meter:
    """A :class:`TerminalMeter` on ``stream`` (stderr) when it is a terminal and not ``quiet``; else :class:`NoMeter`."""
    stream = stream or sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        tty = False
    return TerminalMeter(label, stream) if tty and not quiet else NoMeter()
