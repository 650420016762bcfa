"""Run the real ``gpu-airgap`` entry point in-process and capture what it prints."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import click
import typer

from mirror.cli import main, make_app
from tests.gpgkeys import TestKey


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


def install_argv(bundle: Path, key: TestKey, root: Path, *extra: str) -> list[str]:
    """``install BUNDLE --keyring KEY --root ROOT EXTRA...`` (after ``gpu-airgap``, the zipapp or ``run_cli``)."""
    return ["install", str(bundle), "--keyring", str(key.public), "--root", str(root), *extra]


def run_mirror_sync(
    dest: Path,
    upstream: str,
    keyring: Path,
    *extra: str,
    version: str | None = "1.17.8",
    fmt: str | None = "deb",
    arch: str | None = "amd64",
) -> CliResult:
    """``mirror sync`` from ``upstream`` (verified with ``keyring``) into ``dest``; ``None`` leaves that option out."""
    chosen = [
        *(["--version", version] if version is not None else []),
        *(["--format", fmt] if fmt is not None else []),
        *(["--arch", arch] if arch is not None else []),
    ]
    return run_cli(
        "mirror",
        "sync",
        "--dest",
        str(dest),
        "--upstream",
        upstream,
        "--keyring",
        str(keyring),
        *chosen,
        *extra,
    )


def bundle_build_argv(
    mirror: Path,
    key: TestKey,
    out: Path,
    *extra: str,
    version: str | None = "1.17.8",
    target: str | None = "deb/amd64",
) -> list[str]:
    """``bundle build`` of ``mirror`` into ``out``, signed by ``key``; ``None`` leaves --version/--target out."""
    chosen = [
        *(["--version", version] if version is not None else []),
        *(["--target", target] if target is not None else []),
    ]
    signed = ["--sign-key", key.fingerprint, "--gnupghome", str(key.home)]
    return ["bundle", "build", "--mirror", str(mirror), *chosen, *signed, "--output", str(out), *extra]


def run_bundle_build(
    mirror: Path,
    key: TestKey,
    out: Path,
    *extra: str,
    version: str | None = "1.17.8",
    target: str | None = "deb/amd64",
) -> CliResult:
    """Run :func:`bundle_build_argv` in-process."""
    return run_cli(*bundle_build_argv(mirror, key, out, *extra, version=version, target=target))


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
