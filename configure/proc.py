"""The one place gpu-airgap runs external commands: argv lists only, never a shell."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Optional

from configure.errors import CommandError, ToolError

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
