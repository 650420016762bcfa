"""One vocabulary (issue 18 item 16): --mirror where a mirror is read, --dest only where one is written,
--output everywhere, --cdi auto|on|off in configure as in install; old spellings work for one release, with a warning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import click
import pytest

from plumbing.spellings import OLD_SPELLINGS, modernize
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
    # fleet k8s has --output and --cdi auto|on|off
    args, warnings = modernize(
        command_at(["fleet", "k8s"]), ["--out=x", "--cdi", "--json", "--", "--out", "--cdi"]
    )
    assert args == ["--output=x", "--cdi", "on", "--json", "--", "--out", "--cdi"]
    assert warnings == [
        "--out is deprecated here; use --output (it will be removed in the next release)",
        "--cdi without a value is deprecated; write --cdi on (it will be removed in the next release)",
    ]
    assert modernize(command_at(["configure", "docker"]), ["--cdi", "off"]) == (["--cdi", "off"], [])
    assert modernize(command_at(["install"]), ["--cdi"]) == (["--cdi", "on"], [warnings[1]])


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


# -- issue 25 item 7: one policy for every old spelling, and hints for foreign ones --------------------------


def _has(argv: List[str], name: str) -> bool:
    return name in _options(argv)


@pytest.mark.parametrize(("old", "new"), sorted(OLD_SPELLINGS.items()))
def test_every_old_spelling_works_with_a_warning_on_every_command_that_has_the_new_name(
    old: str, new: str
) -> None:
    commands = [argv for argv in ALL_COMMANDS if _has(argv, new) and not _has(argv, old)]
    assert commands, f"no command has {new}"
    for argv in commands:
        args, warnings = modernize(command_at(argv), [f"{old}=x", old, "y", "--", old])
        assert args == [f"{new}=x", new, "y", "--", old], argv
        assert warnings == [f"{old} is deprecated here; use {new} (it will be removed in the next release)"]


def test_the_old_spellings_reach_bundle_build_fleet_image_and_mirror_list_too() -> None:
    # --out worked on fleet k8s and publish only; --dest on status, verify, prune and publish only
    assert _has(["bundle", "build"], "--output") and _has(["fleet", "image"], "--output")
    assert _has(["mirror", "list"], "--mirror") and not _has(["mirror", "sync"], "--mirror")
    assert modernize(command_at(["mirror", "sync"]), ["--dest", "d"]) == (["--dest", "d"], [])


def test_restart_takes_runtime_and_its_old_engine_with_a_warning(tmp_path: Path) -> None:
    assert _has(["restart"], "--runtime") and not _has(["restart"], "--engine")
    new = run_cli("restart", "--root", str(tmp_path), "--runtime", "docker")
    old = run_cli("restart", "--root", str(tmp_path), "--engine", "docker")
    refusal = (
        f"gpu-airgap: error: engines are restarted only on the running system; {tmp_path} is another root, "
        "restart them there\n"
    )
    assert new.exit_code == old.exit_code == 2 and new.stderr == refusal
    assert old.stderr == (
        "warning: --engine is deprecated here; use --runtime (it will be removed in the next release)\n"
        + refusal
    )


def test_bundle_build_takes_out_with_a_warning_and_reaches_its_own_checks() -> None:
    result = run_cli("bundle", "build", "--mirror", "/nonexistent", "--out", "/tmp/x.tar", "--sign-key", "K")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "warning: --out is deprecated here; use --output (it will be removed in the next release)"
    )
    assert "No such option" not in result.stderr


def test_mirror_sync_mirror_suggests_dest_in_one_line() -> None:
    result = run_cli("mirror", "sync", "--mirror", "/srv/m")
    assert result.exit_code == 2
    assert result.stderr == "gpu-airgap: error: mirror sync has no --mirror; did you mean --dest?\n"


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (
            ["configure", "--runtime=containerd", "--config=/etc/containerd/config.toml", "--set-as-default"],
            "--runtime is nvidia-ctk's spelling; here the engine is the command: "
            "gpu-airgap configure containerd --config /etc/containerd/config.toml --set-as-default",
        ),
        (
            ["configure", "--runtime", "docker", "--enable-cdi", "--nvidia-set-as-default"],
            "--runtime is nvidia-ctk's spelling; here the engine is the command: "
            "gpu-airgap configure docker --cdi on --set-as-default",
        ),
        (
            ["configure", "--config", "/etc/docker/daemon.json", "--cdi.enabled"],
            "--config is nvidia-ctk's spelling; here the engine is the command: "
            "gpu-airgap configure docker --config /etc/docker/daemon.json --cdi on",
        ),
        (
            ["configure", "containerd", "--enable-cdi"],
            "--enable-cdi is nvidia-ctk's spelling; did you mean --cdi on?",
        ),
        (
            ["configure", "containerd", "--nvidia-runtime-name", "nv"],
            "--nvidia-runtime-name is nvidia-ctk's spelling; did you mean --runtime-name?",
        ),
        (
            ["configure", "containerd", "--drop-in-config=/etc/containerd/conf.d/99-nvidia.toml"],
            "--drop-in-config is nvidia-ctk's spelling; did you mean --drop-in?",
        ),
        (
            ["configure", "containerd", "--runtime=containerd"],
            "configure containerd already names the engine; leave --runtime out",
        ),
        (
            ["install", "b.tar", "--keyring", "k", "--enable-cdi"],
            "--enable-cdi is nvidia-ctk's spelling; did you mean --cdi on?",
        ),
    ],
)
def test_nvidia_ctk_spellings_get_one_line_naming_ours(
    tmp_path: Path, argv: List[str], sentence: str
) -> None:
    result = run_cli(*argv, "--root", str(tmp_path)) if argv[-1] != "--set-as-default" else run_cli(*argv)
    assert result.exit_code == 2
    assert result.stderr == f"gpu-airgap: error: {sentence}\n"


def test_an_unknown_option_with_no_hint_is_still_clicks_refusal() -> None:
    result = run_cli("mirror", "verify", "--bogus")
    assert result.exit_code == 2 and "No such option: --bogus" in result.stderr


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
def test_help_marks_every_required_option(argv: List[str]) -> None:
    required = [p.opts[0] for p in command_at(argv).params if isinstance(p, click.Option) and p.required]
    shown = run_cli(*argv, "--help").stdout
    for name in required:
        line = next(line for line in shown.splitlines() if f" {name} " in line)
        assert line.lstrip("│ ").startswith("*"), (name, line)


@pytest.mark.parametrize(
    ("argv", "names", "mark"),
    [
        (
            ["fleet", "k8s"],
            ["--bundle", "--bundle-url", "--bundle-configmap"],
            "(required: one of --bundle, --bundle-url, --bundle-configmap)",
        ),
        (
            ["fleet", "k8s"],
            ["--keyring", "--keyring-configmap"],
            "(required: one of --keyring, --keyring-configmap)",
        ),
        (["fleet", "image"], ["--output", "--push"], "(required: --output, --push or both)"),
        (["bundle", "build"], ["--target", "--locked"], "(required: one of --target, --locked)"),
        (
            ["mirror", "publish"],
            ["--sign-key", "--preserve-upstream"],
            "(required: one of --sign-key, --preserve-upstream)",
        ),
    ],
)
def test_help_marks_options_of_which_one_is_required(argv: List[str], names: List[str], mark: str) -> None:
    for name in names:
        assert (_options(argv)[name].help or "").endswith(mark), name
    assert mark in " ".join(run_cli(*argv, "--help").stdout.replace("│", " ").split())


def test_nvidia_ctks_whole_runtime_configure_line_is_translated() -> None:
    result = run_cli("runtime", "configure", "--runtime=containerd", "--set-as-default", "--enable-cdi")
    assert result.exit_code == 2
    assert result.stderr == (
        "gpu-airgap: error: runtime configure is nvidia-ctk's command; here it is: "
        "gpu-airgap configure containerd --set-as-default --cdi on\n"
    )
