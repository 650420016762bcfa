"""The command line as a new user meets it: -h, --debug anywhere, help that says what is there, conflicts refused.

Issue 18 items 13 (conflicting input is refused, not silently resolved) and 15 (-h, --debug after
the subcommand, help texts that render, the node tool's ``bundle`` help).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Iterator, List

import click
import pytest
import typer

from installer.cli import root as node_cli
from mirror.cli import make_app
from plumbing.clikit import hoist_global_flags, repeated_option
from plumbing.errors import ExitCode
from tests.cli_runner import command_at, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.node_fixtures import seed_containerd_node


def _leaf_commands(group: click.Group, path: List[str]) -> Iterator[List[str]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if hasattr(command, "load"):  # a lazy group stands in for the real one until it runs
            command = command.load()
        assert command is not None
        if isinstance(command, click.Group):
            yield from _leaf_commands(command, [*path, name])
        else:
            yield [*path, name]


ALL_COMMANDS = list(_leaf_commands(typer.main.get_group(make_app()), []))


def test_the_command_walk_sees_every_group() -> None:
    assert {c[0] for c in ALL_COMMANDS} >= {"mirror", "bundle", "configure", "fleet", "install", "status"}
    assert ["configure", "toolkit"] in ALL_COMMANDS and ["mirror", "publish"] in ALL_COMMANDS


@pytest.mark.parametrize("argv", [[], ["mirror"], *ALL_COMMANDS], ids=lambda a: " ".join(a) or "root")
def test_dash_h_prints_the_same_help_as_dash_dash_help(argv: List[str]) -> None:
    short, long = run_cli(*argv, "-h"), run_cli(*argv, "--help")
    assert short.exit_code == long.exit_code == 0, short.stderr
    assert short.stdout == long.stdout and "Usage" in short.stdout


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
def test_every_word_of_a_commands_summary_reaches_its_rendered_help(argv: List[str]) -> None:
    # Rich reads "[nvidia-container-runtime]" as markup and printed "Set  mode": no docstring may lose words.
    command = command_at(argv)
    summary = (command.help or "").split("\n\n")[0]
    shown = " ".join(run_cli(*argv, "--help").stdout.replace("│", " ").split())
    for word in re.findall(r"[A-Za-z][A-Za-z-]+", summary):
        assert word in shown, f"{word!r} of {summary!r} is missing from the help of {' '.join(argv)}"
    assert "  " not in " ".join(summary.split()) and "Set  mode" not in run_cli(*argv, "--help").stdout


def test_configure_toolkit_help_names_the_setting_it_changes() -> None:
    shown = " ".join(run_cli("configure", "toolkit", "--help").stdout.split())
    assert "Set the runtime mode (nvidia-container-runtime.mode)" in shown


def test_debug_after_the_subcommand_is_the_global_debug_flag(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    for argv in (
        ["--debug", "configure", "report", "--root", str(missing)],
        ["configure", "report", "--root", str(missing), "--debug"],
    ):
        result = run_cli(*argv)
        assert result.exit_code == ExitCode.USAGE
        assert "No such option" not in result.stderr
        assert "Traceback" in result.stderr and result.stderr.rstrip().endswith(
            f"the root {missing} is not a directory"
        )


def test_hoisting_stops_at_the_end_of_options() -> None:
    assert hoist_global_flags(["a", "--debug", "b", "--", "--debug"]) == [
        "--debug",
        "a",
        "b",
        "--",
        "--debug",
    ]


def test_the_node_tools_bundle_help_lists_only_the_commands_it_has() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = node_cli.run(node_cli.make_app(), ["bundle", "--help"])
    assert code == 0
    text = out.getvalue()
    assert "build" not in text.lower()
    for name in ("inspect", "verify", "push", "pull"):
        assert name in text
    assert "Build" in run_cli("bundle", "--help").stdout  # the connected side has build, and says so


# -- item 13: conflicting input ---------------------------------------------------------------------------


def test_a_repeated_single_value_option_is_refused_naming_both_values() -> None:
    result = run_cli("mirror", "plan", "--version", "1.17.8", "--version", "1.18.0")
    assert result.exit_code == ExitCode.USAGE
    assert (
        result.stderr.strip()
        == "gpu-airgap: error: --version was given more than once (1.17.8, 1.18.0); give it once"
    )


def test_repeatable_options_and_option_values_that_look_like_options_are_not_repeats() -> None:
    command = typer.main.get_command(make_app())
    assert isinstance(command, click.Group)
    plan = (
        command.get_command(click.Context(command), "mirror")
        .load()
        .get_command(click.Context(command), "plan")
    )  # type: ignore[union-attr]
    assert repeated_option(plan, ["--arch", "amd64", "--arch", "arm64"]) is None
    assert repeated_option(plan, ["--upstream", "--version", "--version", "1"]) is None
    assert repeated_option(plan, ["--version=1", "--version", "2"]) == ("--version", ["1", "2"])


@pytest.mark.parametrize(
    "command",
    [
        ["mirror", "sync", "--dest", "D"],
        ["mirror", "plan"],
        ["bundle", "build", "--mirror", "M", "--sign-key", "K", "--output", "o.tar.zst"],
    ],
)
def test_locked_with_version_is_refused(tmp_path: Path, command: List[str]) -> None:
    lock = tmp_path / "gpu-airgap.lock"
    lock.write_text("{}")
    result = run_cli(*command, "--locked", str(lock), "--version", "1.17.8")
    assert result.exit_code == ExitCode.USAGE
    assert "--locked cannot be combined with --version" in result.stderr
    assert not (tmp_path / "D").exists()


@pytest.mark.parametrize(
    ("name", "compression", "says"),
    [("b.tar.zst", "xz", "zstd"), ("b.tar.xz", "zstd", "xz"), ("b.tgz", "none", "gzip")],
)
def test_a_compression_the_output_name_contradicts_is_refused(
    tmp_path: Path, name: str, compression: str, says: str
) -> None:
    result = run_cli(
        "bundle",
        "build",
        "--mirror",
        str(tmp_path),
        "--sign-key",
        "K",
        "--output",
        str(tmp_path / name),
        "--compression",
        compression,
    )
    assert result.exit_code == ExitCode.USAGE
    assert (
        f"--compression {compression} does not match the output name {name}, which says {says}"
        in result.stderr
    )
    assert not (tmp_path / name).exists()


def test_the_output_name_chooses_the_compression_when_none_is_given() -> None:
    from mirror.bundle.build import compression_for

    assert compression_for(Path("x.tar.xz"), None) == "xz"
    assert compression_for(Path("x.tar"), None) == "none"
    assert compression_for(Path("bundle"), None) == "zstd"
    assert compression_for(Path("bundle"), "gzip") == "gzip"


@pytest.mark.parametrize("engine", ["docker", "crio"])
@pytest.mark.parametrize("value", ["true", "false"])
def test_systemd_cgroup_for_an_engine_that_ignores_it_is_refused(
    tmp_path: Path, engine: str, value: str
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    result = run_cli("configure", engine, "--root", str(root), "--systemd-cgroup", value)
    assert result.exit_code == ExitCode.USAGE
    assert (
        f"--systemd-cgroup applies to containerd only; {engine} sets its cgroup driver itself"
        in result.stderr
    )
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


# -- item 14: ranges in bundle build ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def all_releases_mirror(
    upstream_tree,
    _upstream_session_server,
    tmp_path_factory: pytest.TempPathFactory,  # type: ignore[no-untyped-def]
) -> Path:
    dest = tmp_path_factory.mktemp("all-mirror")
    result = run_mirror_sync(
        dest, _upstream_session_server.url, upstream_tree.public_key, "--quiet", version="all"
    )
    assert result.exit_code == 0, result.stderr
    return dest


@pytest.mark.slow
@pytest.mark.parametrize(
    ("selector", "chosen"), [(">=1.18,<1.20", "1.18.0"), ("1.20.*", "1.20.1"), (">=1.17", "1.20.1")]
)
def test_bundle_build_takes_version_ranges_like_sync(
    all_releases_mirror: Path, operator_key: TestKey, tmp_path: Path, selector: str, chosen: str
) -> None:
    built = run_bundle_build(
        all_releases_mirror, operator_key, tmp_path / "b.tar", "--json", version=selector
    )
    assert built.exit_code == 0, built.stderr
    assert '"toolkit_version": "' + chosen + '"' in built.stdout


@pytest.mark.slow
def test_bundle_build_names_the_range_it_cannot_meet_and_what_the_mirror_has(
    all_releases_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    built = run_bundle_build(all_releases_mirror, operator_key, tmp_path / "b.tar", version=">=1.21")
    assert built.exit_code != 0
    assert "has no toolkit >=1.21 (it has 1.17.8-1, 1.18.0-1, 1.20.1-1)" in built.stderr
    assert not list(tmp_path.iterdir())
    bad = run_cli(
        "bundle",
        "build",
        "--mirror",
        str(all_releases_mirror),
        "--version",
        "all",
        "--sign-key",
        operator_key.fingerprint,
        "--output",
        str(tmp_path / "b.tar"),
        "--target",
        "deb/amd64",
    )
    assert bad.exit_code == ExitCode.USAGE and "a bundle carries one release" in bad.stderr


# -- the same conventions in the node tool, on the node's python3.9 ------------------------------------------


@pytest.mark.slow
def test_the_node_tool_on_python39_takes_dash_h_debug_anywhere_and_answers_json_errors(
    deb_bundle: Path, tmp_path: Path
) -> None:
    import json
    import subprocess

    from tests.node_fixtures import PY39

    subprocess.run(["tar", "-xf", str(deb_bundle), "-C", str(tmp_path), "gpu-airgap-node.pyz"], check=True)
    tool = [str(PY39), "-I", str(tmp_path / "gpu-airgap-node.pyz")]
    env = {"GPU_AIRGAP_NODE_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}

    def node(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*tool, *argv], capture_output=True, text=True, check=False, env=env)

    helped = node("bundle", "-h")
    assert helped.returncode == 0 and "verify" in helped.stdout and "build" not in helped.stdout.lower()
    missing = tmp_path / "nvct.tar.zst"
    failed = node("bundle", "inspect", str(missing), "--json", "--debug")
    assert failed.returncode == ExitCode.USAGE and "Traceback" in failed.stderr
    assert json.loads(failed.stdout)["error"] == {
        "code": "usage",
        "exit_code": 2,
        "message": f"the bundle {missing} does not exist",
    }
