"""``configure report``: the seed's five lines exactly, and ``--evidence DIR`` (issue 18 item 21).

The node is the docs/node.md walk-through's: containerd's config, stand-in GPU device nodes for the CDI
spec, the RuntimeClass manifest written by ``configure runtimeclass``. Every expectation is read
from the files on disk independently (tomllib, PyYAML), not from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib
import yaml

from plumbing.errors import ExitCode
from tests.cli_runner import run_cli
from tests.containerd_helpers import CONFIG, FIXTURES

CRI = "io.containerd.grpc.v1.cri"
SEED = [
    "CONFIG_VERSION=2",
    "RUNTIME=nvidia",
    "RUNTIME_TYPE=io.containerd.runc.v2",
    "SYSTEMD_CGROUP=true",
    "HANDLER=nvidia",
]
MANIFEST = "/etc/kubernetes/runtimeclass-nvidia.yaml"


def _walked(root: Path, *, cdi: bool = True, set_as_default: bool = False) -> Path:
    (root / CONFIG).parent.mkdir(parents=True)
    (root / CONFIG).write_bytes((FIXTURES / "config.toml.base").read_bytes())
    flags = ["--set-as-default"] if set_as_default else []
    assert run_cli("configure", "containerd", "--root", str(root), *flags).exit_code == 0
    if cdi:
        (root / "dev").mkdir()
        (root / "dev/nvidia0").write_text("")
        (root / "dev/nvidiactl").write_text("")
        assert run_cli("configure", "cdi", "--root", str(root)).exit_code == 0
    assert run_cli("configure", "runtimeclass", "--root", str(root), "--output", MANIFEST).exit_code == 0
    return root


def test_report_prints_exactly_the_five_seed_lines(tmp_path: Path) -> None:
    root = _walked(tmp_path / "node")
    result = run_cli("configure", "report", "--root", str(root))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == SEED


def test_all_and_json_give_the_other_facts_too(tmp_path: Path) -> None:
    root = _walked(tmp_path / "node")
    every = run_cli("configure", "report", "--root", str(root), "--all").stdout.splitlines()
    assert every[:5] == SEED and "DEFAULT=runc" in every and "RUNTIMES=nvidia,runc" in every
    as_json = json.loads(run_cli("configure", "report", "--root", str(root), "--json").stdout)
    assert (
        as_json["default"] == "runc" and as_json["systemd_cgroup"] is True and as_json["config_version"] == 2
    )


def test_evidence_writes_the_walkthroughs_files_from_what_is_on_disk(tmp_path: Path) -> None:
    root = _walked(tmp_path / "node")
    evidence = tmp_path / "evidence"
    result = run_cli("configure", "report", "--root", str(root), "--evidence", str(evidence))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == SEED  # stdout stays the report
    assert sorted(p.name for p in evidence.iterdir()) == sorted(
        ["report.txt", "default.txt", "parsed.txt", "cdi-keys.txt", "runtimeclass.yaml"]
    )
    assert (evidence / "report.txt").read_text() == "".join(line + "\n" for line in SEED)
    assert (evidence / "default.txt").read_text() == "DEFAULT=runc\nWHY=runtimeclass\n"
    config = tomllib.loads((root / CONFIG).read_text())
    runtimes = sorted(config["plugins"][CRI]["containerd"]["runtimes"])
    assert (
        evidence / "parsed.txt"
    ).read_text() == f"version = {config['version']}\nruntimes = {json.dumps(runtimes)}\n"
    spec = yaml.safe_load((root / "etc/cdi/nvidia.yaml").read_text())
    assert (evidence / "cdi-keys.txt").read_text().splitlines() == list(spec) and "kind" in spec
    assert (evidence / "runtimeclass.yaml").read_bytes() == (root / MANIFEST.lstrip("/")).read_bytes()


def test_evidence_says_why_once_the_default_was_changed(tmp_path: Path) -> None:
    root = _walked(tmp_path / "node", set_as_default=True)
    result = run_cli("configure", "report", "--root", str(root), "--evidence", str(tmp_path / "ev"), "--json")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "ev/default.txt").read_text() == "DEFAULT=nvidia\nWHY=set-as-default\n"
    assert json.loads(result.stdout)["evidence"]["problems"] == []


def test_evidence_without_a_cdi_spec_writes_the_rest_and_lists_what_is_missing(tmp_path: Path) -> None:
    root = _walked(tmp_path / "node", cdi=False)
    evidence = tmp_path / "evidence"
    result = run_cli("configure", "report", "--root", str(root), "--evidence", str(evidence))
    assert result.exit_code == ExitCode.PROBLEMS_FOUND
    assert "no CDI spec at /etc/cdi/nvidia.yaml (run `gpu-airgap configure cdi`)" in result.stderr
    assert sorted(p.name for p in evidence.iterdir()) == [
        "default.txt",
        "parsed.txt",
        "report.txt",
        "runtimeclass.yaml",
    ]


@pytest.mark.parametrize("where", ["missing/parent/dir", "a-file"])
def test_an_evidence_directory_that_cannot_be_one_is_a_usage_error(tmp_path: Path, where: str) -> None:
    root = _walked(tmp_path / "node")
    (tmp_path / "a-file").write_text("x")
    result = run_cli("configure", "report", "--root", str(root), "--evidence", str(tmp_path / where))
    assert result.exit_code == ExitCode.USAGE, result.stderr
    assert (tmp_path / "a-file").read_text() == "x"
