"""The docs/node.md walk-through for containerd, end to end through the real ``gpu-airgap`` entry point."""

from __future__ import annotations

from pathlib import Path

import tomllib
import yaml

from tests.cli_runner import run_cli
from tests.containerd_helpers import CONFIG, FIXTURES

CRI = "io.containerd.grpc.v1.cri"


def test_walkthrough_registers_reports_is_idempotent_and_reverts(tmp_path: Path) -> None:
    root = tmp_path / "ROOT"
    config = root / CONFIG
    config.parent.mkdir(parents=True)
    original = (FIXTURES / "config.toml.base").read_bytes()
    config.write_bytes(original)

    first = run_cli("configure", "containerd", "--root", str(root))
    assert first.exit_code == 0, first.stderr
    text = config.read_text()
    assert f'[plugins."{CRI}".containerd.runtimes.nvidia]' in text
    assert f'[plugins."{CRI}".containerd.runtimes.nvidia.options]' in text
    data = tomllib.loads(text)
    containerd = data["plugins"][CRI]["containerd"]
    nvidia = containerd["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is True
    assert containerd["default_runtime_name"] == "runc"

    # CDI from stand-in device nodes, and the RuntimeClass manifest (recorded for report/verify).
    (root / "dev").mkdir()
    (root / "dev/nvidia0").write_text("")
    (root / "dev/nvidiactl").write_text("")
    cdi = run_cli("configure", "cdi", "--root", str(root))
    assert cdi.exit_code == 0, cdi.stderr
    spec = yaml.safe_load((root / "etc/cdi/nvidia.yaml").read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    manifest = root / "etc/kubernetes/runtimeclass-nvidia.yaml"  # --output is a node path under --root
    rc = run_cli(
        "configure",
        "runtimeclass",
        "--root",
        str(root),
        "--output",
        "/etc/kubernetes/runtimeclass-nvidia.yaml",
    )
    assert rc.exit_code == 0, rc.stderr
    assert yaml.safe_load(manifest.read_text())["handler"] == "nvidia"

    report = run_cli("configure", "report", "--root", str(root))
    assert report.exit_code == 0, report.stderr
    assert report.stdout.splitlines() == [  # the walk-through's report, exactly
        "CONFIG_VERSION=2",
        "RUNTIME=nvidia",
        "RUNTIME_TYPE=io.containerd.runc.v2",
        "SYSTEMD_CGROUP=true",
        "HANDLER=nvidia",
    ]
    lines = run_cli("configure", "report", "--root", str(root), "--all").stdout.splitlines()
    assert "DEFAULT=runc" in lines and "DEFAULT_UNCHANGED=true" in lines

    written = config.read_bytes()
    second = run_cli("configure", "containerd", "--root", str(root))
    assert second.exit_code == 0
    assert "already configured" in second.stdout
    assert config.read_bytes() == written

    reverted = run_cli("configure", "revert", "--root", str(root))
    assert reverted.exit_code == 0, reverted.stderr
    assert config.read_bytes() == original
