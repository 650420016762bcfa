"""Run the real ``gpu-airgap`` entry point in-process and capture what it prints."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from mirror.cli import main


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*argv: str) -> CliResult:
    """Call ``gpu-airgap ARGV...`` through :func:`mirror.cli.main`, as the console script does."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return CliResult(code, out.getvalue(), err.getvalue())
