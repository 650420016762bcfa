"""``configure runtimeclass``: a manifest Kubernetes accepts, and the handler recorded for verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from configure.journal import Journal
from configure.revert import revert
from configure.runtimeclass import RECORD, manifest, read_record
from plumbing.errors import ConfigFormatError, ExitCode, UsageError
from plumbing.fsutil import rooted
from tests.cli_runner import run_cli


def test_stdout_manifest_parses_with_the_four_fields_and_the_handler_is_recorded(tmp_path: Path) -> None:
    result = run_cli("configure", "runtimeclass", "--root", str(tmp_path), "--handler", "nvidia-cdi")
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout) == {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia-cdi",
    }
    assert read_record(tmp_path) == {"name": "nvidia", "handler": "nvidia-cdi", "output": None}


def test_output_is_a_node_path_under_the_root_and_a_second_run_writes_nothing(tmp_path: Path) -> None:
    args = ("configure", "runtimeclass", "--root", str(tmp_path), "--output", "/etc/k8s/runtimeclass.yaml")
    first = run_cli(*args)
    written = rooted(tmp_path, "/etc/k8s/runtimeclass.yaml")
    assert first.exit_code == 0 and f"wrote {written}" in first.stdout and "HANDLER=nvidia" in first.stdout
    assert yaml.safe_load(written.read_text())["metadata"]["name"] == "nvidia"
    assert json.loads(rooted(tmp_path, RECORD).read_text())["output"] == "/etc/k8s/runtimeclass.yaml"
    second = run_cli(*args)
    assert "already configured" in second.stdout
    revert("runtimeclass", Journal(tmp_path))
    assert not written.exists() and not rooted(tmp_path, RECORD).exists()


def test_a_relative_output_under_another_root_is_refused_since_it_would_land_outside_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    result = run_cli("configure", "runtimeclass", "--root", str(root), "--output", "rc.yaml", "--name", "gpu")
    assert result.exit_code == ExitCode.USAGE
    assert f"--output 'rc.yaml' is relative, so it would land outside --root {root}" in result.stderr
    assert not (tmp_path / "rc.yaml").exists() and read_record(root) is None


@pytest.mark.parametrize(
    ("name", "handler"), [("NVIDIA", "nvidia"), ("nvidia", "nvidia.cdi"), ("nvidia", "-x")]
)
def test_names_kubernetes_would_reject_are_usage_errors(tmp_path: Path, name: str, handler: str) -> None:
    with pytest.raises(UsageError):
        manifest(name, handler)
    result = run_cli(
        "configure", "runtimeclass", "--root", str(tmp_path), "--name", name, "--handler", handler
    )
    assert result.exit_code == ExitCode.USAGE
    assert not rooted(tmp_path, RECORD).exists()


def test_a_corrupt_record_is_reported(tmp_path: Path) -> None:
    record = rooted(tmp_path, RECORD)
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    with pytest.raises(ConfigFormatError, match="run configure runtimeclass again"):
        read_record(tmp_path)
    assert read_record(tmp_path / "empty") is None
