"""Run the real ``gpu-airgap`` entry point in-process and capture what it prints."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Sequence

import click
import typer

from mirror.cli import main, make_app


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


def command_at(argv: Sequence[str]) -> click.Command:
    """The click command ``gpu-airgap ARGV...`` runs (lazy groups loaded), for what its help and options say."""
    command: click.Command = typer.main.get_group(make_app())
    for name in argv:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None, f"gpu-airgap has no command {' '.join(argv)}"
        load = getattr(found, "load", None)  # a lazily loaded group
        command = load() if load is not None else found
    return command
