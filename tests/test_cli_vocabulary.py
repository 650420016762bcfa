"""One vocabulary (issue 18 item 16): --mirror where a mirror is read, --dest only where one is written,
--output everywhere, --cdi auto|on|off in configure as in install; old spellings work for one release, with a warning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import click
import pytest

from plumbing.clikit import rewrite_legacy
from tests.cli_runner import command_at, run_cli
from tests.gpgkeys import TestKey
from tests.test_cli_conventions import ALL_COMMANDS
from tests.test_configure_commands import make_root


def _options(argv: List[str]) -> Dict[str, click.Option]:
    return {name: p for p in command_at(argv).params if isinstance(p, click.Option) for name in p.opts}


def test_dest_is_only_where_a_mirror_is_written_and_out_is_nowhere() -> None:
    with_dest = [" ".join(argv) for argv in ALL_COMMANDS if "--dest" in _options(argv)]
    with_out = [" ".join(argv) for argv in ALL_COMMANDS if "--out" in _options(argv)]
    assert with_dest == ["mirror sync"] and with_out == []


@pytest.mark.parametrize(
    "argv",
    [
        ["mirror", "status"],
        ["mirror", "verify"],
        ["mirror", "prune"],
        ["mirror", "publish"],
        ["bundle", "build"],
    ],
)
def test_every_command_that_reads_a_mirror_calls_it_mirror(argv: List[str]) -> None:
    assert "--mirror" in _options(argv)


@pytest.mark.parametrize(
    "argv", [["mirror", "publish"], ["fleet", "k8s"], ["bundle", "build"], ["bundle", "pull"]]
)
def test_what_a_command_writes_is_output(argv: List[str]) -> None:
    assert "--output" in _options(argv)


def test_cdi_takes_the_same_words_in_configure_install_and_fleet() -> None:
    choices = {
        " ".join(argv): getattr(_options(argv)["--cdi"].type, "choices", None)
        for argv in (
            ["configure", "containerd"],
            ["configure", "docker"],
            ["configure", "crio"],
            ["install"],
            ["fleet", "k8s"],
        )
    }
    assert set(map(tuple, choices.values())) == {("auto", "on", "off")}, choices  # type: ignore[arg-type]
    assert _options(["configure", "containerd"])["--cdi"].default == "off"
    assert _options(["install"])["--cdi"].default == "auto"


def test_the_rewrite_maps_old_spellings_and_leaves_values_and_the_end_of_options_alone() -> None:
    args, warnings = rewrite_legacy(
        ["--out=x", "--dest", "m", "--cdi", "--json", "--", "--out"],
        {"--out": "--output", "--dest": "--mirror"},
        {"--cdi": ("on", ("auto", "on", "off"))},
    )
    assert args == ["--output=x", "--mirror", "m", "--cdi", "on", "--json", "--", "--out"]
    assert len(warnings) == 3 and all("deprecated" in w and "next release" in w for w in warnings)
    assert rewrite_legacy(["--cdi", "off"], {}, {"--cdi": ("on", ("auto", "on", "off"))}) == (
        ["--cdi", "off"],
        [],
    )


def test_mirror_verify_still_takes_dest_with_a_deprecation_warning(deb_mirror: Path) -> None:
    new = run_cli("mirror", "verify", "--mirror", str(deb_mirror), "--json")
    old = run_cli("mirror", "verify", "--dest", str(deb_mirror), "--json")
    assert new.exit_code == old.exit_code == 0, old.stderr
    assert json.loads(new.stdout) == json.loads(old.stdout) and json.loads(new.stdout)["mirror"] == str(
        deb_mirror
    )
    assert new.stderr == ""
    assert (
        old.stderr.strip()
        == "warning: --dest is deprecated here; use --mirror (it will be removed in the next release)"
    )


def test_fleet_k8s_still_takes_out_with_a_deprecation_warning(operator_key: TestKey, tmp_path: Path) -> None:
    args = (
        "fleet",
        "k8s",
        "--bundle-url",
        "http://10.0.0.1/b.tar.zst",
        "--bundle-sha256",
        "ab" * 32,
        "--keyring",
        str(operator_key.public),
    )
    old = run_cli(*args, "--out", str(tmp_path / "old.yaml"))
    assert run_cli(*args, "--output", str(tmp_path / "new.yaml")).exit_code == old.exit_code == 0
    assert (tmp_path / "old.yaml").read_bytes() == (tmp_path / "new.yaml").read_bytes()
    assert "--out is deprecated here; use --output" in old.stderr


def test_publish_still_takes_dest_and_out(tmp_path: Path) -> None:
    # the old spellings reach the command: its own check of the (missing) mirror answers, not click
    result = run_cli(
        "mirror",
        "publish",
        "--dest",
        str(tmp_path / "m"),
        "--out",
        str(tmp_path / "o"),
        "--base-url",
        "http://m/",
        "--sign-key",
        "K",
    )
    assert "No such option" not in result.stderr and "Missing option" not in result.stderr
    assert (
        "--dest is deprecated here; use --mirror" in result.stderr
        and "--out is deprecated here; use --output" in result.stderr
    )


@pytest.mark.parametrize(
    ("argv", "driver", "enabled"),
    [
        (["--cdi", "on"], False, True),
        (["--cdi", "off"], True, False),
        (["--cdi", "auto"], False, False),
        (["--cdi", "auto"], True, True),
        ([], True, False),
    ],
)
def test_configure_cdi_means_what_install_cdi_means(
    tmp_path: Path, argv: List[str], driver: bool, enabled: bool
) -> None:
    make_root(tmp_path, "config.toml.base")
    if driver:
        (tmp_path / "dev").mkdir(exist_ok=True)
        (tmp_path / "dev" / "nvidiactl").touch()
    result = run_cli("configure", "containerd", "--root", str(tmp_path), "--json", *argv)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["facts"]["cdi"] is enabled


def test_a_bare_cdi_still_means_on_with_a_deprecation_warning(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    result = run_cli("configure", "containerd", "--root", str(tmp_path), "--cdi", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["facts"]["cdi"] is True
    assert "--cdi without a value is deprecated; write --cdi on" in result.stderr
