"""Exit codes as docs/reference.md says, and one --json envelope on every command (issue 25 item 9)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import List

import click
import pytest

from plumbing.errors import ExitCode
from tests.cli_runner import command_at, run_cli
from tests.containerd_helpers import make_root
from tests.gpgkeys import TestKey
from tests.node_fixtures import build_target, write_signed_bundle
from tests.test_cli_conventions import ALL_COMMANDS

NOT_A_KEY = "holds no OpenPGP public key (gpg --export KEY > FILE)"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, test_key: TestKey) -> Path:
    out = tmp_path_factory.mktemp("keys-bundle")
    target = build_target(out / "t", "deb", "1.17.8-1", "amd64")
    return write_signed_bundle(out / "b.tar", [target], test_key.home, test_key.fingerprint)


def _key_commands(bundle: Path, keyring: Path, root: Path) -> List[List[str]]:
    return [
        ["bundle", "verify", str(bundle), "--keyring", str(keyring)],
        ["install", str(bundle), "--keyring", str(keyring), "--root", str(root)],
    ]


def test_a_keyring_that_is_no_key_is_a_usage_error_not_a_verification_failure(
    bundle: Path, tmp_path: Path
) -> None:
    for keyring in (bundle, tmp_path / "notes.txt"):
        if keyring.suffix == ".txt":
            keyring.write_text("not a key\n")
        for argv in _key_commands(bundle, keyring, tmp_path):
            result = run_cli(*argv)
            assert result.exit_code == ExitCode.USAGE, (argv, result.stderr)
            assert result.stderr.splitlines()[-1] == f"gpu-airgap: error: the key file {keyring} {NOT_A_KEY}"


def test_a_gpg_keybox_is_named_with_the_export_that_makes_a_key_file(
    bundle: Path, test_key: TestKey, tmp_path: Path
) -> None:
    keybox = test_key.home / "pubring.kbx"
    assert keybox.read_bytes()[8:12] == b"KBXf"
    for argv in _key_commands(bundle, keybox, tmp_path):
        result = run_cli(*argv)
        assert result.exit_code == ExitCode.USAGE, (argv, result.stderr)
        assert result.stderr.splitlines()[-1] == (
            f"gpu-airgap: error: the key file {keybox} is a gpg keybox (pubring.kbx), not a public key file; "
            f"export the key from it: gpg --no-default-keyring --keyring {keybox} --export KEY > operator.gpg"
        )
    # and the export it names is a key file the command takes
    exported = tmp_path / "operator.gpg"
    with exported.open("wb") as out:
        subprocess.run(
            [
                "gpg",
                "--homedir",
                str(tmp_path),
                "--no-default-keyring",
                "--keyring",
                str(keybox),
                "--export",
                test_key.fingerprint,
            ],
            stdout=out,
            check=True,
            capture_output=False,
        )
    assert run_cli("bundle", "verify", str(bundle), "--keyring", str(exported)).exit_code == 0


# -- one --json ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
def test_every_command_spells_json_the_same(argv: List[str]) -> None:
    options = [
        p for p in command_at(argv).params if isinstance(p, click.Option) and any("json" in o for o in p.opts)
    ]
    (option,) = options
    assert option.opts == ["--json"] and option.secondary_opts == [] and option.is_flag
    assert option.help == "Print one JSON object."


@pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
def test_every_json_command_refuses_in_the_one_envelope(argv: List[str]) -> None:
    result = run_cli(*argv, "--json", "--xyzzy")
    assert result.exit_code == ExitCode.USAGE
    data = json.loads(result.stdout)
    assert list(data) == ["ok", "error"] and data["ok"] is False
    assert data["error"] == {"code": "usage", "exit_code": 2, "message": "No such option: --xyzzy"}


def test_a_success_is_ok_first_then_the_commands_fields(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    data = json.loads(run_cli("configure", "report", "--root", str(tmp_path), "--json").stdout)
    assert (
        next(iter(data)) == "ok"
        and data["ok"] is True
        and "error" not in data
        and data["handler"] == "nvidia"
    )


def test_a_check_that_finds_problems_is_not_ok_and_carries_its_error_in_the_same_object(
    tmp_path: Path,
) -> None:
    mirror = tmp_path / "m"
    (mirror / "stable").mkdir(parents=True)
    result = run_cli("mirror", "verify", "--mirror", str(mirror), "--json")
    data = json.loads(result.stdout)  # one object: json.loads refuses a second
    assert result.exit_code == int(data["error"]["exit_code"]) != 0
    assert next(iter(data)) == "ok" and data["ok"] is False and list(data)[-1] == "error"
    assert data["error"]["message"] == result.stderr.strip().removeprefix("gpu-airgap: error: ")


def test_fleet_k8s_json_describes_the_file_it_wrote_and_refuses_to_share_stdout(
    operator_key: TestKey, tmp_path: Path
) -> None:
    args = ["fleet", "k8s", "--bundle-url", "http://10.0.0.1/b.tar.zst", "--bundle-sha256", "ab" * 32]
    args += ["--keyring", str(operator_key.public)]
    written = run_cli(*args, "--output", str(tmp_path / "ds.yaml"), "--json")
    assert written.exit_code == 0, written.stderr
    data = json.loads(written.stdout)
    assert data["ok"] is True and data["output"] == str(tmp_path / "ds.yaml")
    assert data["bytes"] == (tmp_path / "ds.yaml").stat().st_size
    shared = run_cli(*args, "--json")
    assert shared.exit_code == 2
    assert json.loads(shared.stdout)["error"]["message"] == (
        "--json and --output - both write to stdout; write the output elsewhere"
    )


def test_configure_runtimeclass_and_lxd_json_carry_what_they_would_print(tmp_path: Path) -> None:
    rc = run_cli("configure", "runtimeclass", "--root", str(tmp_path), "--dry-run", "--json")
    assert rc.exit_code == 0, rc.stderr
    data = json.loads(rc.stdout)
    assert (
        data["ok"] is True
        and "kind: RuntimeClass" in data["manifest"]
        and "handler: nvidia" in data["manifest"]
    )
    lxd = json.loads(run_cli("configure", "lxd", "--json").stdout)
    assert lxd["ok"] is True and lxd["daemon"] == "lxd" and lxd["ran"] == []
    assert lxd["commands"] == run_cli("configure", "lxd").stdout.splitlines()
