"""The command-line contract: groups, version, one-sentence errors and named exit codes."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from mirror.cli import CONNECTED_GROUPS
from plumbing.errors import ExitCode
from plumbing.version import VERSION
from tests.cli_runner import run_cli


def test_help_lists_every_group_and_node_command() -> None:
    result = run_cli("--help")
    assert result.exit_code == 0
    for name in ("mirror", "bundle", "configure", "install", "uninstall", "status"):
        assert name in result.stdout


def test_version_prints_the_single_sourced_version() -> None:
    result = run_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"gpu-airgap {VERSION}"


def test_unknown_option_is_a_usage_error() -> None:
    result = run_cli("--no-such-option")
    assert result.exit_code == ExitCode.USAGE


@pytest.mark.parametrize("group", ["mirror", "bundle", "configure"])
def test_each_group_has_help(group: str) -> None:
    result = run_cli(group, "--help")
    assert result.exit_code == 0
    assert "Usage" in result.stdout


def test_command_errors_quote_the_line_that_says_what_went_wrong() -> None:
    from plumbing.errors import CommandError

    stderr = (
        "dpkg: warning: 'ldconfig' not found in PATH or not executable\n"
        "dpkg: error: 1 expected program not found in PATH or not executable\n"
        "Note: root's PATH should usually contain /usr/local/sbin, /usr/sbin and /sbin\n"
    )
    message = str(CommandError(["/usr/bin/dpkg", "-i", "x.deb"], 2, stderr))
    assert (
        message
        == "/usr/bin/dpkg exited with status 2: dpkg: error: 1 expected program not found in PATH or not executable"
    )
    assert str(CommandError(["gpg"], 2, "")).endswith("no error output")
    assert str(CommandError(["rpm"], 1, "one\ntwo\n")).endswith(": two")


@pytest.mark.parametrize("name", sorted(CONNECTED_GROUPS))
def test_connected_lazy_group_help_matches_the_group_it_stands_for(name: str) -> None:
    module, attribute, help_text = CONNECTED_GROUPS[name]
    group: typer.Typer = getattr(importlib.import_module(module), attribute)
    assert typer.main.get_group(group).help == help_text


def test_a_mirror_command_loads_neither_the_bundle_builder_nor_the_fleet_renderer() -> None:
    # Start-up time is most of a no-op `mirror sync`: each command imports only what it runs.
    code = (
        "import json, sys; from mirror.cli import main; main(['mirror', 'status', '--help']); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TYPER_USE_RICH": "0"},
        cwd=Path(__file__).parent.parent,
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "--mirror" in done.stdout and "mirror.sync.cli" in loaded
    assert not loaded & {
        "mirror.bundle.build",
        "mirror.fleet.cli",
        "mirror.fleet.k8s",
        "yaml",
        "configure.cli",
    }
