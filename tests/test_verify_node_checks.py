"""``configure verify`` checks what a container would trip over: CDI host paths, and the OCI hook file."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from configure.crio import hook_config, hook_problems
from tests.cli_runner import run_cli

HOOK = "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def _cdi_node(root: Path) -> Path:
    (root / "dev").mkdir(parents=True)
    for name in ("nvidia0", "nvidiactl"):
        (root / "dev" / name).write_text("")  # stand-ins: only existence is checked
    assert run_cli("configure", "cdi", "--root", str(root)).exit_code == 0
    (root / "etc/docker").mkdir()
    (root / "etc/docker/daemon.json").write_text("{}\n")
    assert run_cli("configure", "docker", "--root", str(root)).exit_code == 0
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-container-runtime").write_text("#!/bin/sh\n")
    return root / "etc/cdi/nvidia.yaml"


def test_verify_names_a_device_node_the_spec_lists_but_the_node_lacks(tmp_path: Path) -> None:
    spec_path = _cdi_node(tmp_path)
    ok = run_cli("configure", "verify", "--root", str(tmp_path), "--runtime", "docker")
    assert "ok: /etc/cdi/nvidia.yaml: every device node and mount it names exists" in ok.stdout.splitlines()

    spec = yaml.safe_load(spec_path.read_text())
    spec["devices"].insert(1, {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}})
    spec["containerEdits"]["mounts"] = [
        {"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1"}
    ]
    spec_path.write_text(yaml.safe_dump(spec))
    result = run_cli("configure", "verify", "--root", str(tmp_path), "--runtime", "docker")
    assert result.exit_code == 9
    problems = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM: /etc/cdi")]
    assert (
        "PROBLEM: /etc/cdi/nvidia.yaml is stale: devices[1] (1).deviceNodes: /dev/nvidia1 does not exist on the node"
        in problems
    )
    assert any("mounts: /usr/lib/libcuda.so.1 does not exist" in p for p in problems)


def test_verify_of_hook_mode_checks_the_hook_file_and_its_binary(tmp_path: Path) -> None:
    assert run_cli("configure", "crio", "--hook", "--root", str(tmp_path)).exit_code == 0
    missing = run_cli("configure", "verify", "--root", str(tmp_path), "--runtime", "crio")
    assert missing.exit_code == 9
    assert (
        "PROBLEM: crio: the hook binary /usr/bin/nvidia-container-runtime-hook does not exist"
        in missing.stdout
    )
    assert "not registered" not in missing.stdout  # hook mode has no runtime entry to look for

    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    assert run_cli("configure", "verify", "--root", str(tmp_path), "--runtime", "crio").exit_code == 0
    (tmp_path / HOOK).write_text('{"version": "1.0.0", "hook": {"path": "hook"}}')
    broken = run_cli("configure", "verify", "--root", str(tmp_path), "--runtime", "crio")
    assert broken.exit_code == 9
    assert "hook.path must be an absolute path" in broken.stdout and "stages must list" in broken.stdout


def test_the_hook_we_write_has_no_problems_and_each_broken_field_is_named() -> None:
    good = hook_config("/usr/bin/nvidia-container-runtime-hook")
    assert hook_problems(json.dumps(good).encode()) == []
    assert hook_problems(b"{") and "not valid JSON" in hook_problems(b"{")[0]
    for field, value, named in (
        ("version", "2.0", "version"),
        ("when", {}, "when must set"),
        ("stages", ["prestrat"], "stages must list"),
    ):
        assert any(named in p for p in hook_problems(json.dumps(dict(good, **{field: value})).encode()))
