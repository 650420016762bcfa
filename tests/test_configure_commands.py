"""The shared command layer: dry-run, JSON, verify's problem list, set-as-default + revert, registry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import tomllib

from configure.engine import Engine
from configure.engines import get_engine
from plumbing.errors import ExitCode
from tests.cli_runner import run_cli
from tests.containerd_helpers import CONFIG, make_root

FIXTURES = Path(__file__).parent / "data" / "fixtures"

_conforms: Engine = get_engine("containerd")  # the containerd engine satisfies the Engine Protocol


def test_dry_run_prints_the_diff_and_writes_nothing(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    before = config.read_bytes()
    result = run_cli("configure", "containerd", "--root", str(tmp_path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert '+        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in result.stdout
    assert config.read_bytes() == before
    assert not (tmp_path / "var").exists()  # no journal, no backups


def test_json_output_is_one_object_with_the_facts(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    result = run_cli("configure", "containerd", "--root", str(tmp_path), "--json", "--cdi", "on")
    data = json.loads(result.stdout)
    assert data["facts"]["runtime"] == "nvidia" and data["facts"]["cdi"] is True
    assert data["written"] == [str(tmp_path / CONFIG)]


def test_set_as_default_then_revert_restores_the_previous_default(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    original = config.read_bytes()
    assert run_cli("configure", "containerd", "--root", str(tmp_path), "--set-as-default").exit_code == 0
    report = run_cli("configure", "report", "--root", str(tmp_path), "--all").stdout.splitlines()
    assert "DEFAULT=nvidia" in report and "DEFAULT_UNCHANGED=false" in report
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-container-runtime").write_text("#!/bin/sh\n")
    assert run_cli("configure", "verify", "--root", str(tmp_path)).exit_code == 0
    assert run_cli("configure", "revert", "--root", str(tmp_path)).exit_code == 0
    assert config.read_bytes() == original
    data = tomllib.loads(config.read_text())
    assert data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "runc"


def test_verify_lists_every_problem_with_a_non_zero_exit(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    assert run_cli("configure", "containerd", "--root", str(tmp_path)).exit_code == 0
    # Someone flips the default behind our back; the binary is missing; the handler is unknown.
    config.write_text(
        config.read_text().replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    )
    state = tmp_path / "var/lib/gpu-airgap/configure/runtimeclass.json"
    state.write_text(json.dumps({"name": "nvidia", "handler": "gpu", "path": "/tmp/rc.yaml"}))
    cdi = tmp_path / "etc/cdi/nvidia.yaml"
    cdi.parent.mkdir(parents=True)
    cdi.write_text("cdiVersion: 0.5.0\nkind: example.com/gpu\ndevices: []\n")
    result = run_cli("configure", "verify", "--root", str(tmp_path))
    assert result.exit_code == ExitCode.PROBLEMS_FOUND
    problems = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM:")]
    assert any("handler 'gpu'" in p for p in problems)
    assert any("/usr/bin/nvidia-container-runtime does not exist" in p for p in problems)
    assert any("operator chose 'runc'" in p for p in problems)
    assert any("nvidia.com/gpu" in p for p in problems)
    assert len(problems) == 5  # the spec lacks both the right kind and any device


def test_unknown_engine_is_a_clear_usage_error(tmp_path: Path) -> None:
    result = run_cli("configure", "report", "--root", str(tmp_path), "--runtime", "rkt")
    assert result.exit_code == ExitCode.USAGE
    assert (
        "Invalid value for '--runtime': 'rkt' is not one of 'containerd', 'docker', 'crio', 'podman', 'lxc'"
        in result.stderr
    )


def test_invalid_config_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    make_root(tmp_path, text="version = = 2\n")
    result = run_cli("configure", "containerd", "--root", str(tmp_path))
    assert result.exit_code == ExitCode.CONFIG
    assert "config.toml: is not valid TOML" in result.stderr


@pytest.mark.parametrize(
    ("engine_name", "fixture", "node_path", "flags"),
    [
        ("containerd", "containerd/config.toml.base", "/opt/k8s/containerd.toml", ["--no-drop-in"]),
        ("docker", "docker/daemon.json", "/opt/docker/daemon.json", []),
        ("crio", "crio/crio.conf", "/opt/crio/crio.conf", ["--no-drop-in"]),
    ],
)
def test_report_and_verify_read_back_the_config_a_custom_config_run_edited(
    tmp_path: Path, engine_name: str, fixture: str, node_path: str, flags: list[str]
) -> None:
    config = tmp_path / node_path.lstrip("/")
    config.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, config)
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-container-runtime").write_text("#!/bin/sh\n")
    root = str(tmp_path)
    result = run_cli("configure", engine_name, "--root", root, "--config", node_path, *flags)
    assert result.exit_code == 0, result.stderr
    assert not (tmp_path / "etc").exists()  # nothing was written at the engine's default path

    report = run_cli("configure", "report", "--root", root, "--runtime", engine_name)
    assert report.exit_code == 0, report.stderr
    assert "RUNTIME=nvidia" in report.stdout.splitlines()
    as_json = json.loads(
        run_cli("configure", "report", "--root", root, "--runtime", engine_name, "--json").stdout
    )
    assert as_json["runtime"] == "nvidia" and as_json["runtime_path"] == "/usr/bin/nvidia-container-runtime"
    for engine_flags in (["--json"], ["--json", "--dry-run"]):  # configure --json: one object, run after run
        again = json.loads(
            run_cli(
                "configure", engine_name, "--root", root, "--config", node_path, *flags, *engine_flags
            ).stdout
        )
        assert again["already_configured"] is True and again["written"] == []
    verify = run_cli("configure", "verify", "--root", root, "--json")
    assert verify.exit_code == 0, verify.stdout
    assert f"{engine_name}: runtime nvidia is registered" in json.loads(verify.stdout)["passed"]
    # --config still reads another file on request.
    elsewhere = run_cli(
        "configure", "report", "--root", root, "--runtime", engine_name, "--config", "/nowhere.conf"
    )
    assert "RUNTIME=nvidia" not in elsewhere.stdout.splitlines()


#: util-linux's setpriv: run a command as nobody with no capabilities left
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _scratch_nobody_can_reach() -> Path:
    """A new directory in the system temp dir, where nobody can reach it.

    pytest's own tree (``/tmp/pytest-of-root``, 0700) is closed to nobody at any depth; under
    pytest-xdist the session directories sit one level deeper than without it.
    """
    return Path(tempfile.mkdtemp(prefix="ro-", dir=tempfile.gettempdir()))


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to run as nobody"
)
@pytest.mark.parametrize(
    ("engine_name", "fixture", "node_path"),
    [
        ("containerd", "containerd/config.toml.base", "/etc/containerd/config.toml"),
        ("docker", "docker/daemon.json", "/etc/docker/daemon.json"),
        ("crio", "crio/crio.conf", "/etc/crio/crio.conf"),
    ],
)
def test_a_read_only_config_is_refused_with_a_sentence_and_nothing_is_written(
    engine_name: str, fixture: str, node_path: str
) -> None:
    # Root may replace a 0444 file, so the refusal is exercised as a user without write access,
    # through the real console entry point in a child process.
    root = _scratch_nobody_can_reach()
    try:
        root.chmod(0o755)
        config = root / node_path.lstrip("/")
        config.parent.mkdir(parents=True)
        shutil.copy(FIXTURES / fixture, config)
        if engine_name == "crio":
            (root / "etc/crio/crio.conf.d").mkdir()
            (root / "etc/crio/crio.conf.d/99-nvidia.toml").write_text("# ours, read-only\n")
            (root / "etc/crio/crio.conf.d/99-nvidia.toml").chmod(0o444)
            os.chown(root / "etc/crio/crio.conf.d/99-nvidia.toml", 65534, 65534)
        config.chmod(0o444)
        # the user's own file, read-only: theirs to fix (someone else's is "must run as root": test_node_not_root)
        os.chown(config, 65534, 65534)
        for directory in (root, *(p for p in config.parents if root in p.parents)):
            directory.chmod(0o755)
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        result = subprocess.run(
            [*AS_NOBODY, sys.executable, "-m", "mirror", "configure", engine_name, "--root", str(root)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=root,
        )
        assert result.returncode == ExitCode.CONFIG, result.stderr
        assert "is read-only for this user (mode 0444)" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
        assert not (root / "var").exists()  # no journal, no backup
    finally:
        shutil.rmtree(root)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to run as nobody"
)
def test_a_read_only_toolkit_config_is_refused_before_its_backup_is_journaled() -> None:
    # The journal is writable, the config is not: the write must be refused before the backup and
    # the journal entry, or revert would later restore a write that never happened.
    root = _scratch_nobody_can_reach()
    try:
        root.chmod(0o755)
        config = root / "etc/nvidia-container-runtime/config.toml"
        config.parent.mkdir(parents=True)
        config.write_text('[nvidia-container-runtime]\nmode = "auto"\n')
        config.chmod(0o444)
        os.chown(config, 65534, 65534)  # the user's own read-only file (root's: "must run as root")
        state = root / "var/lib/gpu-airgap/configure"
        state.mkdir(parents=True)
        os.chown(state, 65534, 65534)
        for directory in (root, *(p for p in config.parents if root in p.parents)):
            directory.chmod(0o755)
        result = subprocess.run(
            [
                *AS_NOBODY,
                sys.executable,
                "-m",
                "mirror",
                "configure",
                "toolkit",
                "--root",
                str(root),
                "--mode",
                "cdi",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=root,
        )
        assert result.returncode == ExitCode.CONFIG, result.stderr
        assert "is read-only for this user (mode 0444)" in result.stderr
        assert config.read_text() == '[nvidia-container-runtime]\nmode = "auto"\n'
        assert list(state.iterdir()) == []  # no journal, no backup
    finally:
        shutil.rmtree(root)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand a file to another owner")
def test_configure_and_revert_keep_the_owner_and_mode_and_one_backup_per_change(tmp_path: Path) -> None:
    config = make_root(tmp_path, "config.toml.base")
    original = config.read_bytes()
    os.chown(config, 65534, 65534)
    config.chmod(0o600)
    assert run_cli("configure", "containerd", "--root", str(tmp_path)).exit_code == 0
    assert run_cli("configure", "containerd", "--root", str(tmp_path), "--cdi", "on").exit_code == 0
    assert (
        run_cli("configure", "containerd", "--root", str(tmp_path), "--cdi", "on").exit_code == 0
    )  # no change
    stat = config.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (65534, 65534, 0o600)
    backups = sorted((tmp_path / "var/lib/gpu-airgap/configure/backups").iterdir())
    assert len(backups) == 2  # one per change; the third run changed nothing
    assert backups[0].read_bytes() == original
    assert run_cli("configure", "revert", "--root", str(tmp_path)).exit_code == 0
    stat = config.stat()
    assert config.read_bytes() == original
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (65534, 65534, 0o600)
