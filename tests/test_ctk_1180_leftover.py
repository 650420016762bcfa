"""``configure verify`` flags the containerd drop-in nvidia-ctk 1.18.0 left in ``/etc/containerd/config.d``.

The drop-in is made by NVIDIA's real nvidia-ctk 1.20.0 told to write where 1.18.0 wrote by default
(``--drop-in-config=/etc/containerd/config.d/99-nvidia.toml``): 1.18.0's drop-in and its ``imports`` line
named that directory (NVIDIA/nvidia-container-toolkit#1404, fixed by #1407 in 1.18.1).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from configure.ctk_leftovers import containerd_leftovers, outdated_drop_ins
from configure.releases import release_for
from tests.cli_runner import run_cli
from tests.engine_oracle import nvidia_ctk, oracle_missing

OLD = "/etc/containerd/config.d/99-nvidia.toml"
NEW = "/etc/containerd/conf.d/99-nvidia.toml"
CONFIG = "etc/containerd/config.toml"
PLAIN = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'

needs_ctk = pytest.mark.skipif(bool(oracle_missing()), reason=oracle_missing() or "ready")


def _node(root: Path) -> Path:
    (root / "etc/containerd").mkdir(parents=True)
    (root / CONFIG).write_text(PLAIN)
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-container-runtime").write_text("#!/bin/sh\n")
    return root


def _ctk_1180_files(root: Path) -> Dict[str, str]:
    """What nvidia-ctk writes when its drop-in path is 1.18.0's: the drop-in and the top-level config.

    It runs for real (its ``--dry-run`` prints the default ``conf.d`` import whatever the drop-in path)
    on the files under ``root``; the import it writes names the root-prefixed directory, which is
    turned back into the node path, as nvidia-ctk 1.18.0 wrote it on the node itself.
    """
    config = root / CONFIG
    before = config.read_text()
    argv = [
        str(nvidia_ctk()),
        "runtime",
        "configure",
        "--runtime=containerd",
        f"--config={config}",
        f"--drop-in-config={root}{OLD}",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    top_level = config.read_text().replace(str(root), "")
    assert '"/etc/containerd/config.d/*.toml"' in top_level  # the import line 1.18.0 wrote
    config.write_text(before)
    return {"drop-in": (root / OLD.lstrip("/")).read_text(), "top-level": top_level}


def _write(root: Path, node_path: str, text: str) -> None:
    path = root / node_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_outdated_drop_in_path_comes_from_the_1_18_0_row_of_the_release_table() -> None:
    found = outdated_drop_ins()
    assert [path for path, _ in found] == [OLD]
    assert found[0][1] is release_for("1.18.0-1")


@pytest.mark.slow
@needs_ctk
def test_verify_flags_a_1_18_0_drop_in_containerd_does_not_import(tmp_path: Path) -> None:
    root = _node(tmp_path)
    # only the drop-in is left: the config.d import in config.toml was lost since (a package reset the file)
    _write(root, OLD, _ctk_1180_files(root)["drop-in"])
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    result = run_cli("configure", "verify", "--root", str(root), "--runtime", "containerd")
    assert result.exit_code == 9, result.stdout
    assert (
        f"PROBLEM: containerd: {OLD} is the containerd drop-in nvidia-ctk 1.18.0 wrote to the wrong directory; "
        "containerd does not read it because /etc/containerd/config.toml imports nothing from /etc/containerd/config.d/"
    ) in result.stdout


@pytest.mark.slow
@needs_ctk
def test_verify_flags_a_1_18_0_drop_in_read_as_well_as_a_newer_one(tmp_path: Path) -> None:
    root = _node(tmp_path)
    texts = _ctk_1180_files(root)
    _write(root, OLD, texts["drop-in"])
    _write(root, "/" + CONFIG, texts["top-level"])  # 1.18.0 ran: config.toml imports config.d
    assert run_cli("configure", "containerd", "--root", str(root), "--drop-in", NEW).exit_code == 0
    result = run_cli("configure", "verify", "--root", str(root), "--runtime", "containerd")
    assert result.exit_code == 9, result.stdout
    line = next(line for line in result.stdout.splitlines() if OLD in line)
    assert f"containerd reads it as well as {NEW}, so the nvidia runtime is defined twice" in line
    assert "remove /etc/containerd/config.d/*.toml from the imports of /etc/containerd/config.toml" in line


@pytest.mark.slow
@needs_ctk
def test_verify_leaves_alone_a_config_d_drop_in_that_containerd_imports_and_only_it_defines(
    tmp_path: Path,
) -> None:
    root = _node(tmp_path)
    texts = _ctk_1180_files(root)
    _write(root, OLD, texts["drop-in"])
    _write(root, "/" + CONFIG, texts["top-level"])
    assert containerd_leftovers(root) == []
    result = run_cli("configure", "verify", "--root", str(root), "--runtime", "containerd")
    assert "wrong directory" not in result.stdout
    assert "ok: containerd: runtime nvidia is registered" in result.stdout


def test_verify_of_a_node_without_the_leftover_flags_nothing(tmp_path: Path) -> None:
    root = _node(tmp_path)
    assert run_cli("configure", "containerd", "--root", str(root), "--drop-in", NEW).exit_code == 0
    assert containerd_leftovers(root) == []
    result = run_cli("configure", "verify", "--root", str(root), "--runtime", "containerd")
    assert result.exit_code == 0, result.stdout
    assert "wrong directory" not in result.stdout


@pytest.mark.slow
@needs_ctk
def test_status_lists_the_1_18_0_drop_in_containerd_ignores_as_a_problem(tmp_path: Path) -> None:
    root = _node(tmp_path)
    _write(root, OLD, _ctk_1180_files(root)["drop-in"])
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    result = run_cli("status", "--root", str(root), "--json")
    problems = json.loads(result.stdout)["problems"]
    assert any(
        p.startswith(f"containerd: {OLD} is the containerd drop-in nvidia-ctk 1.18.0") for p in problems
    ), problems
    assert result.exit_code == 9  # ExitCode.PROBLEMS_FOUND, as verify
