"""The one place gpu-airgap runs external commands: argv lists only, never a shell."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import IO, BinaryIO, Optional

from plumbing.errors import CommandError, ToolError

log = logging.getLogger(__name__)


def run(
    argv: Sequence[str],
    *,
    input_bytes: Optional[bytes] = None,
    env_overrides: Optional[Mapping[str, str]] = None,
    check: bool = True,
    timeout: Optional[float] = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` and capture its output.

    :param argv: the command and its arguments.
    :param input_bytes: bytes fed to standard input.
    :param env_overrides: variables added to (or replacing) the current environment.
    :param check: raise :class:`CommandError` on a non-zero exit.
    :param timeout: seconds before the command is killed.
    :raises CommandError: when the command fails and ``check`` is true.
    :raises ToolError: when the command is not installed.
    """
    env = dict(os.environ)
    if env_overrides:
        env.update(env_overrides)
    log.debug("running %s", " ".join(argv))
    try:
        result = subprocess.run(  # argv list, never a shell
            list(argv), input=input_bytes, capture_output=True, env=env, check=False, timeout=timeout
        )
    except FileNotFoundError as exc:
        raise ToolError(f"{argv[0]} is not installed or not on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, -1, f"timed out after {timeout} s") from exc
    if check and result.returncode != 0:
        raise CommandError(argv, result.returncode, result.stderr.decode("utf-8", "replace"))
    return result


def which(name: str) -> Optional[str]:
    """Return the full path of ``name`` on PATH, or None."""
    return shutil.which(name)


class FilterPipe:
    """A streaming external filter (``zstd -dc``): bytes from ``source`` in, output read from :attr:`stdout`.

    Memory stays flat: a thread copies ``source`` to the command's stdin in chunks while the
    caller reads its stdout. Use as a context manager; leaving it waits for the command and
    raises :class:`CommandError` if it failed (unless the caller stopped reading early).
    """

    def __init__(self, argv: Sequence[str], source: BinaryIO, *, chunk: int = 1 << 20) -> None:
        """Start ``argv`` and the feeder thread."""
        self.argv = list(argv)
        log.debug("running %s", " ".join(self.argv))
        try:
            self._proc = subprocess.Popen(  # argv list, never a shell
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except FileNotFoundError as exc:
            raise ToolError(f"{self.argv[0]} is not installed or not on PATH") from exc
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self.stdout: IO[bytes] = self._proc.stdout
        self.feed_error: Optional[BaseException] = None
        self._thread = threading.Thread(
            target=self._feed, args=(source, self._proc.stdin, chunk), daemon=True
        )
        self._thread.start()

    def _feed(self, source: BinaryIO, sink: BinaryIO, chunk: int) -> None:
        try:
            while True:
                block = source.read(chunk)
                if not block:
                    break
                sink.write(block)
        except BrokenPipeError:
            pass  # the command stopped reading (it failed, or the caller closed early)
        except BaseException as exc:  # surfaced to the caller in close()
            self.feed_error = exc
        finally:
            with contextlib.suppress(OSError):
                sink.close()

    def close(self, *, check: bool = True) -> None:
        """Stop reading, wait for the command and the feeder; raise if either failed."""
        with contextlib.suppress(OSError):
            self.stdout.close()
        stderr = self._proc.stderr.read() if self._proc.stderr else b""
        returncode = self._proc.wait()
        self._thread.join()
        if self.feed_error is not None and check:
            raise self.feed_error
        if check and returncode != 0:
            raise CommandError(self.argv, returncode, stderr.decode("utf-8", "replace"))

    def __enter__(self) -> FilterPipe:
        """Return self."""
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Close; failures of the command only raise when the block itself succeeded."""
        self.close(check=exc_type is None)
