"""One rule per value, everywhere: the same refusal from every command that takes it, before anything changes.

``--root`` that is not a directory, ``--runtime-name``/``--runtime-path`` no engine can use, a
``--keyring`` that is not a key file, and a value outside an option's choices are each refused with
exit 2 by every command that takes them (the choices with click's own usage error).
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from plumbing.errors import ExitCode
from tests.cli_runner import install_argv, run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import seed_containerd_node

ROOT_COMMANDS = [
    ["configure", "containerd"],
    ["configure", "docker"],
    ["configure", "crio"],
    ["configure", "toolkit", "--mode", "cdi"],
    ["configure", "cdi"],
    ["configure", "runtimeclass", "--output", "/etc/rc.yaml"],
    ["configure", "report"],
    ["configure", "verify"],
    ["configure", "revert"],
    ["status"],
    ["uninstall"],
    ["restart"],
]


@pytest.mark.parametrize("argv", ROOT_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_a_root_that_does_not_exist_is_refused_and_not_created(tmp_path: Path, argv: List[str]) -> None:
    missing = tmp_path / "no-such-root"
    result = run_cli(*argv, "--root", str(missing))
    assert result.exit_code == ExitCode.USAGE, result.stderr
    assert result.stderr.strip() == f"gpu-airgap: error: the root {missing} is not a directory"
    assert not missing.exists()


@pytest.mark.parametrize("engine", ["containerd", "docker", "crio"])
def test_configure_refuses_a_runtime_name_as_install_does(
    tmp_path: Path, engine: str, test_key: TestKey
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    bundle = tmp_path / "bundle.tar"
    bundle.write_bytes(b"never read")
    configured = run_cli("configure", engine, "--root", str(root), "--runtime-name", "x y")
    installed = run_cli(
        *install_argv(bundle, test_key, root),
        "--runtime-name",
        "x y",
    )
    sentence = "gpu-airgap: error: --runtime-name 'x y' must be letters, digits, '-' or '_'"
    assert (configured.exit_code, configured.stderr.strip()) == (ExitCode.USAGE, sentence)
    assert (installed.exit_code, installed.stderr.strip()) == (ExitCode.USAGE, sentence)
    assert not (root / "var/lib/gpu-airgap").exists()


@pytest.mark.parametrize("path", ["relative/nvidia-container-runtime", "./nvidia-container-runtime", ""])
def test_configure_refuses_a_relative_runtime_path(tmp_path: Path, path: str) -> None:
    root = seed_containerd_node(tmp_path / "root")
    for engine in ("containerd", "docker", "crio"):
        result = run_cli("configure", engine, "--root", str(root), "--runtime-path", path, "--dry-run")
        assert result.exit_code == ExitCode.USAGE, result.stdout
        expected = f"--runtime-path {path!r} must be an absolute path" if path else "--runtime-path is empty"
        assert expected in result.stderr


def test_a_bare_runtime_command_name_stays_allowed_as_docker_looks_it_up_on_its_path(tmp_path: Path) -> None:
    root = seed_containerd_node(tmp_path / "root")
    result = run_cli(
        "configure", "docker", "--root", str(root), "--runtime-path", "nvidia-container-runtime", "--dry-run"
    )
    assert result.exit_code == 0 and '"path": "nvidia-container-runtime"' in result.stdout


def _keyring_commands(tmp_path: Path, key: str) -> List[List[str]]:
    bundle = tmp_path / "bundle.tar"
    bundle.write_bytes(b"never read")
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return [
        ["install", str(bundle), "--keyring", key, "--root", str(root)],
        ["bundle", "verify", str(bundle), "--keyring", key],
        ["install", "oci://127.0.0.1:9/nvct:1.17.8", "--keyring", key, "--root", str(root)],
        ["bundle", "push", str(bundle), "oci://127.0.0.1:9/nvct:1.17.8", "--keyring", key],
        ["bundle", "pull", "oci://127.0.0.1:9/nvct:1.17.8", "--keyring", key, "--output", str(tmp_path)],
        [
            "mirror",
            "sync",
            "--dest",
            str(tmp_path / "m"),
            "--keyring",
            key,
            "--upstream",
            "http://127.0.0.1:9/",
        ],
        ["mirror", "plan", "--keyring", key, "--upstream", "http://127.0.0.1:9/"],
        [
            "mirror",
            "publish",
            "--mirror",
            str(tmp_path / "m"),
            "--output",
            str(tmp_path / "o"),
            "--base-url",
            "http://m/",
            "--preserve-upstream",
            "--keyring",
            key,
        ],
        ["fleet", "k8s", "--bundle-url", "http://m/b.tar", "--keyring", key],
    ]


@pytest.mark.parametrize(("key", "what"), [("DIR", "is a directory"), ("/dev/null", "is a character device")])
def test_every_command_taking_a_keyring_says_what_a_non_key_file_is(
    tmp_path: Path, key: str, what: str
) -> None:
    path = str(tmp_path) if key == "DIR" else key
    for argv in _keyring_commands(tmp_path, path):
        result = run_cli(*argv)
        assert result.exit_code == ExitCode.USAGE, (argv, result.stderr)
        assert (
            result.stderr.strip()
            == f"gpu-airgap: error: the key file {path} {what}, not a public key file (gpg --export KEY > FILE)"
        ), argv


BAD_CHOICES = [
    (["install", "B", "--keyring", "K", "--runtime", "bogus"], "--runtime"),
    (["install", "B", "--keyring", "K", "--cdi", "bogus"], "--cdi"),
    (["restart", "--runtime", "bogus"], "--runtime"),
    (["configure", "containerd", "--systemd-cgroup", "bogus"], "--systemd-cgroup"),
    (["configure", "toolkit", "--mode", "bogus"], "--mode"),
    (["configure", "report", "--runtime", "bogus"], "--runtime"),
    (["configure", "verify", "--runtime", "bogus"], "--runtime"),
    (["configure", "revert", "--runtime", "bogus"], "--runtime"),
    (
        ["bundle", "build", "--mirror", "M", "--sign-key", "K", "--output", "O", "--compression", "bogus"],
        "--compression",
    ),
    (
        ["bundle", "build", "--mirror", "M", "--sign-key", "K", "--output", "O", "--channel", "bogus"],
        "--channel",
    ),
    (["mirror", "sync", "--dest", "D", "--channel", "bogus"], "--channel"),
    (["mirror", "plan", "--channel", "bogus"], "--channel"),
    (["fleet", "k8s", "--bundle-url", "http://m/b", "--runtime", "bogus"], "--runtime"),
    (["fleet", "k8s", "--bundle-url", "http://m/b", "--cdi", "bogus"], "--cdi"),
    (["fleet", "k8s", "--bundle-url", "http://m/b", "--tools", "bogus"], "--tools"),
]


@pytest.mark.parametrize(
    ("argv", "option"), BAD_CHOICES, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_a_value_outside_an_options_choices_is_clicks_usage_error(argv: List[str], option: str) -> None:
    result = run_cli(*argv)
    assert result.exit_code == ExitCode.USAGE, result.stderr
    assert f"Error: Invalid value for '{option}': 'bogus' is not one of" in result.stderr
    assert result.stderr.startswith("Usage: gpu-airgap ")
