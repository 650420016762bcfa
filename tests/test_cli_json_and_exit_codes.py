"""--json speaks one style and errors as JSON too; exit codes are those of docs/reference.md (issue 18 item 17).

Keys are snake_case and values typed (a boolean is a boolean, a number a number). With ``--json`` an
error is one JSON object on stdout (the sentence stays on stderr) and the exit code does not change.
The fault matrix's cases exit with the code docs/reference.md names: an unknown ``--sign-key`` and a
bundle file that does not exist are usage errors (2), a damaged zstd bundle fails verification (3),
a release the mirror lacks is unresolvable (6).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, List

import pytest

from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_bundle_build, run_cli
from tests.gpgkeys import TestKey
from tests.test_configure_commands import make_root

SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
#: objects keyed by data (package names, file paths), not by field names
DATA_MAPS = {"packages", "kept", "units"}


def _style_problems(value: Any, where: str = "$") -> List[str]:
    problems: List[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if where.rsplit(".", 1)[-1] not in DATA_MAPS and not SNAKE.match(key):
                problems.append(f"{where}: key {key!r} is not snake_case")
            problems += _style_problems(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            problems += _style_problems(item, f"{where}[{index}]")
    elif isinstance(value, str) and value in ("true", "false", "True", "False"):
        problems.append(f"{where}: the boolean {value!r} is a string")
    return problems


def _json(result: CliResult) -> Any:
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)  # exactly one object: json.loads refuses anything after it


def test_the_style_check_finds_what_it_judges() -> None:
    assert _style_problems(
        {"RUNTIME": "nvidia", "ok": "true", "packages": {"nvidia-container-toolkit": "1"}}
    ) == ["$: key 'RUNTIME' is not snake_case", "$.ok: the boolean 'true' is a string"]


def test_configure_json_is_snake_case_and_typed(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    configured = _json(run_cli("configure", "containerd", "--root", str(tmp_path), "--cdi", "on", "--json"))
    assert _style_problems(configured) == []
    assert configured["facts"]["runtime"] == "nvidia" and configured["facts"]["cdi"] is True
    assert configured["facts"]["config_version"] == 2
    report = _json(run_cli("configure", "report", "--root", str(tmp_path), "--json"))
    assert _style_problems(report) == []
    assert report["systemd_cgroup"] in (True, False) and report["handler"] == "nvidia"
    for argv in (["configure", "toolkit"], ["configure", "verify"], ["status"]):
        shown = run_cli(*argv, "--root", str(tmp_path), "--json")
        assert _style_problems(_json(shown)) == [], argv
    status = _json(run_cli("status", "--root", str(tmp_path), "--json"))
    assert status["engines"]["containerd"]["runtime"] == "nvidia"


@pytest.mark.slow
def test_bundle_and_mirror_json_is_snake_case_and_typed(
    deb_bundle: Path, deb_mirror: Path, operator_key: TestKey
) -> None:
    for argv in (
        ["bundle", "inspect", str(deb_bundle)],
        ["bundle", "verify", str(deb_bundle), "--keyring", str(operator_key.public)],
        ["mirror", "verify", "--mirror", str(deb_mirror)],
        ["mirror", "status", "--mirror", str(deb_mirror), "--offline"],
    ):
        result = run_cli(*argv, "--json")
        assert result.exit_code == 0, result.stderr
        assert _style_problems(_json(result)) == [], argv


# -- errors as JSON ---------------------------------------------------------------------------------------


def _error(result: CliResult, code: ExitCode) -> dict[str, Any]:
    assert result.exit_code == code, result.stderr
    data = _json(result)
    assert (
        data["ok"] is False
        and data["error"]["exit_code"] == int(code)
        and data["error"]["code"] == code.name.lower()
    )
    assert data["error"]["message"] in result.stderr  # the sentence is on stderr as without --json
    assert _style_problems(data) == []
    return data  # type: ignore[no-any-return]


def test_a_usage_error_with_json_is_one_json_object_on_stdout(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    data = _error(run_cli("configure", "containerd", "--root", str(missing), "--json"), ExitCode.USAGE)
    assert data["error"]["message"] == f"the root {missing} is not a directory"
    _error(run_cli("mirror", "plan", "--version", "1", "--version", "2", "--json"), ExitCode.USAGE)
    bad_choice = _error(
        run_cli("configure", "containerd", "--root", str(tmp_path), "--cdi", "maybe", "--json"),
        ExitCode.USAGE,
    )
    assert "--cdi" in bad_choice["error"]["message"]


def test_without_json_an_error_prints_nothing_on_stdout(tmp_path: Path) -> None:
    result = run_cli("configure", "containerd", "--root", str(tmp_path / "nowhere"))
    assert result.exit_code == ExitCode.USAGE and result.stdout == ""


def test_a_check_that_lists_problems_prints_one_object_not_two(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    result = run_cli("configure", "verify", "--root", str(tmp_path), "--runtime", "containerd", "--json")
    assert result.exit_code == ExitCode.PROBLEMS_FOUND
    data = _json(result)
    assert data["ok"] is False and data["problems"]


# -- exit codes of the fault matrix -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["bundle", "verify", "{b}", "--keyring", "{k}"],
        ["bundle", "inspect", "{b}"],
        ["install", "{b}", "--keyring", "{k}", "--root", "{r}"],
        ["bundle", "push", "{b}", "oci://127.0.0.1:9/x:1", "--keyring", "{k}"],
    ],
)
def test_a_bundle_file_that_does_not_exist_is_a_usage_error(
    tmp_path: Path, test_key: TestKey, argv: List[str]
) -> None:
    bundle = tmp_path / "nvct.tar.zst"
    args = [a.format(b=bundle, k=test_key.public, r=tmp_path) for a in argv]
    result = run_cli(*args)
    assert result.exit_code == ExitCode.USAGE, result.stderr
    assert result.stderr.strip() == f"gpu-airgap: error: the bundle {bundle} does not exist"
    _error(run_cli(*args, "--json"), ExitCode.USAGE)
    gone = tmp_path / "moved.tar.zst"
    bundle.symlink_to(gone)  # a link left behind after the bundle was moved
    dangling = run_cli(*args)
    assert dangling.exit_code == ExitCode.USAGE, dangling.stderr
    assert (
        dangling.stderr.strip()
        == f"gpu-airgap: error: the bundle {bundle} is a link to {gone}, which does not exist"
    )


@pytest.mark.slow
def test_an_unknown_sign_key_is_a_usage_error(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    unknown = "0123456789ABCDEF0123456789ABCDEF01234567"
    built = run_cli(
        "bundle",
        "build",
        "--mirror",
        str(deb_mirror),
        "--target",
        "deb/amd64",
        "--sign-key",
        unknown,
        "--gnupghome",
        str(operator_key.home),
        "--output",
        str(tmp_path / "b.tar.zst"),
    )
    assert built.exit_code == ExitCode.USAGE, built.stderr
    assert f"--sign-key {unknown} is not a secret key in {operator_key.home}" in built.stderr
    assert not list(tmp_path.iterdir())
    published = run_cli(
        "mirror",
        "publish",
        "--mirror",
        str(deb_mirror),
        "--output",
        str(tmp_path / "www"),
        "--base-url",
        "http://m/",
        "--sign-key",
        unknown,
        "--gnupghome",
        str(operator_key.home),
        "--json",
    )
    _error(published, ExitCode.USAGE)
    assert not (tmp_path / "www").exists()


@pytest.mark.slow
def test_a_release_the_mirror_lacks_is_unresolvable_as_in_sync(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    built = run_bundle_build(deb_mirror, operator_key, tmp_path / "b.tar.zst", "--json", version="9.9.9")
    data = _error(built, ExitCode.UNRESOLVABLE)
    assert "has no toolkit 9.9.9 (it has 1.17.8-1)" in data["error"]["message"]


@pytest.mark.slow
def test_a_damaged_zstd_bundle_is_a_verification_failure_with_or_without_json(
    deb_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    damaged = tmp_path / "damaged.tar.zst"
    shutil.copyfile(deb_bundle, damaged)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x55
    damaged.write_bytes(bytes(data))
    plain = run_cli("bundle", "verify", str(damaged), "--keyring", str(operator_key.public))
    assert plain.exit_code == ExitCode.VERIFICATION_FAILED
    as_json = run_cli("bundle", "verify", str(damaged), "--keyring", str(operator_key.public), "--json")
    assert as_json.exit_code == ExitCode.VERIFICATION_FAILED
    assert _json(as_json)["ok"] is False
