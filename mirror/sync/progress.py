"""How a sync shows progress: rich bars on a terminal, plain lines on a pipe, nothing when quiet.

All output goes to stderr, so ``--json`` on stdout stays one clean object. rich is imported only
when a bar is drawn: on a pipe or with ``--quiet`` its import would be most of a no-op sync's time.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID


class QuietProgress:
    """Shows nothing."""

    def stage(self, text: str) -> None:
        """Ignore."""

    def start_downloads(self, files: int, total_bytes: int) -> None:
        """Ignore."""

    def advance(self, nbytes: int) -> None:
        """Ignore."""

    def close(self) -> None:
        """Ignore."""


class LineProgress:
    """Plain lines for logs and pipes: each step, then the download at most every few seconds."""

    def __init__(self, stream: TextIO | None = None, *, every: float = 5.0) -> None:
        """Write to ``stream`` (stderr by default), a download line at most every ``every`` seconds."""
        self.stream = stream or sys.stderr
        self.every = every
        self._lock = threading.Lock()
        self._done = 0
        self._total = 0
        self._last = 0.0

    def stage(self, text: str) -> None:
        """Print the step."""
        self.stream.write(f"{text}\n")

    def start_downloads(self, files: int, total_bytes: int) -> None:
        """Print what will be downloaded."""
        self._total, self._last = total_bytes, time.monotonic()
        self.stream.write(
            f"downloading {files} file(s), {_mib(total_bytes)}\n" if files else "nothing to download\n"
        )

    def advance(self, nbytes: int) -> None:
        """Count bytes; print a line now and then."""
        with self._lock:
            self._done += nbytes
            now = time.monotonic()
            if now - self._last >= self.every:
                self._last = now
                self.stream.write(f"  {_mib(self._done)} of {_mib(self._total)}\n")

    def close(self) -> None:
        """Nothing to tear down."""


class BarProgress:
    """A rich progress bar on the terminal."""

    def __init__(self, console: Console | None = None) -> None:
        """Draw on ``console`` (stderr by default)."""
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.console = console or Console(stderr=True)
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self._task: TaskID | None = None

    def stage(self, text: str) -> None:
        """Print the step above the bar."""
        self.console.print(text, highlight=False)

    def start_downloads(self, files: int, total_bytes: int) -> None:
        """Start the bar."""
        if files:
            self._bar.start()
            self._task = self._bar.add_task(f"{files} file(s)", total=total_bytes)

    def advance(self, nbytes: int) -> None:
        """Move the bar (rich's Progress is thread-safe)."""
        if self._task is not None:
            self._bar.advance(self._task, nbytes)

    def close(self) -> None:
        """Remove the bar."""
        self._bar.stop()


def choose(*, quiet: bool, json_output: bool) -> QuietProgress | LineProgress | BarProgress:
    """Bars on a terminal, lines otherwise, nothing with ``--quiet`` or ``--json``."""
    if quiet or json_output:
        return QuietProgress()
    return BarProgress() if sys.stderr.isatty() else LineProgress()


def _mib(nbytes: int) -> str:
    return f"{nbytes / 1048576:.1f} MiB"
