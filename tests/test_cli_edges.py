"""Issue 24.15: hostile or odd input is one sentence and a documented exit code, never a traceback.

The classes are handled once, where errors are printed (:func:`plumbing.clikit.error_for`,
:func:`plumbing.clikit.check_utf8_arguments`), so each is tried with several commands: a path longer
than the kernel takes, a command-line value that is not UTF-8, JSON nested deeper than Python's
parser recurses, and a ``SOURCE_DATE_EPOCH`` no signature can carry.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

from plumbing.errors import ExitCode
from tests import bundle_tamper as tamper
from tests.cli_runner import CliResult, run_cli
from tests.gpgkeys import TestKey

LONG = "/tmp/" + "a" * 100_000
NOT_UTF8 = os.fsdecode(b"/usr/bin/nvidia-\xff")  # what Python makes of such an argv byte
NESTED = b"[" * 100_000 + b"]" * 100_000
SHA = "ab" * 32


def _one_sentence(result: CliResult, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--root", LONG],
        ["configure", "containerd", "--root", LONG],
        ["configure", "docker", "--root", LONG, "--dry-run"],
        ["configure", "revert", "--root", LONG],
        ["uninstall", "--root", LONG],
        ["mirror", "verify", "--mirror", LONG],
        [
            "fleet",
            "k8s",
            "--bundle-url",
            "http://h/b",
            "--bundle-sha256",
            SHA,
            "--keyring-configmap",
            "k",
            "--output",
            LONG,
        ],
    ],
    ids=lambda argv: "-".join(a for a in argv[:2] if not a.startswith("/")),
)
def test_a_path_too_long_for_the_kernel_is_a_usage_error(argv: List[str]) -> None:
    _one_sentence(
        run_cli(*argv), ExitCode.USAGE, "the path '/tmp/aaaa", "characters) is too long for this system"
    )


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["mirror", "sync", "--upstream", "http://127.0.0.1:9/" + NOT_UTF8], "--upstream"),
        (["fleet", "k8s", "--output", NOT_UTF8], "--output"),
        (["configure", "docker", "--runtime-path", NOT_UTF8], "--runtime-path"),
        (["configure", "containerd", f"--runtime-path={NOT_UTF8}"], "--runtime-path"),
        (["bundle", "verify", NOT_UTF8], "an argument"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(value[:2]),
)
def test_a_value_that_is_not_utf8_is_refused_naming_its_option_before_anything_runs(
    argv: List[str], option: str, tmp_path: Path
) -> None:
    # --root is a scratch directory: a regression must not edit this machine
    root = ["--root", str(tmp_path)] if argv[0] == "configure" else []
    result = run_cli(*argv, *root)
    _one_sentence(result, ExitCode.USAGE, f"{option} '", "nvidia-\\xff' is not valid UTF-8")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["configure", "docker"], ["status"], ["configure", "docker", "--dry-run"]])
def test_a_daemon_json_nested_too_deeply_is_one_sentence(argv: List[str], tmp_path: Path) -> None:
    config = tmp_path / "etc/docker/daemon.json"
    config.parent.mkdir(parents=True)
    config.write_bytes(NESTED)
    result = run_cli(*argv, "--root", str(tmp_path))
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    if argv != ["status"]:
        _one_sentence(result, ExitCode.CONFIG, "daemon.json", "nests its JSON too deeply to be read")
    assert config.read_bytes() == NESTED


@pytest.mark.parametrize("argv", [["status"], ["configure", "revert"], ["uninstall"]])
def test_records_nested_too_deeply_are_one_sentence_from_the_central_handler(
    argv: List[str], tmp_path: Path
) -> None:
    for record in ("var/lib/gpu-airgap/state.json", "var/lib/gpu-airgap/configure/journal.json"):
        (tmp_path / record).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / record).write_bytes(NESTED)
    result = run_cli(*argv, "--root", str(tmp_path))
    _one_sentence(result, ExitCode.ERROR, "the input is nested too deeply to be read")


@pytest.fixture(scope="module")
def nested_manifest_bundle(deb_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real bundle with its manifest replaced by deeply nested JSON (the old signature kept)."""
    out = tmp_path_factory.mktemp("nested") / "deep.tar.zst"
    return tamper.repack(deb_bundle, out, {"manifest.json": NESTED})


def test_verify_refuses_a_nested_manifest_on_its_signature_without_parsing_it(
    nested_manifest_bundle: Path, operator_key: TestKey
) -> None:
    result = run_cli("bundle", "verify", str(nested_manifest_bundle), "--keyring", str(operator_key.public))
    assert result.exit_code == ExitCode.VERIFICATION_FAILED, result.stderr
    assert "signature" in result.stderr and "nested" not in result.stderr and "Traceback" not in result.stderr


def test_inspect_of_a_nested_manifest_is_one_sentence(nested_manifest_bundle: Path) -> None:
    result = run_cli("bundle", "inspect", str(nested_manifest_bundle))
    _one_sentence(result, ExitCode.VERIFICATION_FAILED, "nested too deeply to be a manifest")


@pytest.mark.parametrize("command", ["bundle build", "mirror publish"])
@pytest.mark.parametrize("value", ["99999999999", "4294967296", "\uff11\uff12"])
def test_source_date_epoch_out_of_range_is_a_usage_error(
    command: str,
    value: str,
    deb_mirror: Path,
    operator_key: TestKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    out = tmp_path / "out"
    options = {
        "bundle build": "--version=1.17.8 --target=deb/amd64",
        "mirror publish": "--base-url=http://mirror.example/nvidia",
    }[command]
    where = f"--mirror={deb_mirror} --gnupghome={operator_key.home} {options}".split()
    result = run_cli(*command.split(), *where, "--sign-key", operator_key.fingerprint, "--output", str(out))
    _one_sentence(result, ExitCode.USAGE, "SOURCE_DATE_EPOCH=")
    assert not out.exists()


# -- issue 24.16: values that would mean something else than the user meant ------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["configure", "containerd"],
        ["configure", "docker", "--dry-run"],
        ["configure", "revert"],
        ["uninstall"],
        ["install", "b.tar.zst", "--keyring", "k.asc"],
    ],
    ids=lambda argv: "-".join(argv[:2]),
)
@pytest.mark.parametrize("spelling", [["--root", ""], ["--root="]], ids=["separate", "equals"])
def test_an_empty_root_is_refused_rather_than_taken_as_the_current_directory(
    argv: List[str], spelling: List[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a regression edits this scratch directory, not the live system
    result = run_cli(*argv, *spelling)
    _one_sentence(result, ExitCode.USAGE, "--root is empty, which would mean the current directory")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        (["--format", ""], "--format is empty"),
        (["--arch", ""], "--arch is empty"),
        (["--format=", "--arch", "amd64"], "--format is empty"),
        (["--format", ",", "--arch", "amd64"], "--format and --arch name no target"),
        (["--format", "deb", "--arch", ","], "--format and --arch name no target"),
    ],
)
def test_mirror_sync_with_no_format_or_arch_is_a_usage_error_not_an_empty_mirror(
    options: List[str], complaint: str, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    result = run_cli("mirror", "sync", "--dest", str(dest), "--upstream", "http://127.0.0.1:9", *options)
    _one_sentence(result, ExitCode.USAGE, complaint)
    assert not dest.exists()


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        (["--tools", "host", "--rootfs", "/"], "--rootfs would be ignored here: --tools host packs"),
        (
            ["--tools", "image", "--rootfs", "/nonexistent", "--busybox", "/bin/busybox"],
            "--busybox would be ignored",
        ),
        (["--push", "oci://127.0.0.1:9/t:1", "--tag", "x:1"], "--tag would be ignored here"),
        (
            ["--ca-file", "/etc/hosts"],
            "--ca-file would be ignored here: --ca-file is for the registry of --push",
        ),
        (["--plain-http"], "--plain-http would be ignored here"),
    ],
)
def test_fleet_image_refuses_an_option_the_combination_would_ignore(
    options: List[str], complaint: str, tmp_path: Path
) -> None:
    output = ["--output", str(tmp_path / "tools.tar")] if "--push" not in options else []
    result = run_cli("fleet", "image", *options, *output)
    _one_sentence(result, ExitCode.USAGE, complaint)
    assert list(tmp_path.iterdir()) == []
