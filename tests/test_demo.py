"""``make demo`` runs the whole pipeline end to end and exits by itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_runs_sync_bundle_install_configure_report_and_uninstall(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.demo"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(PROJECT), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "re-sync with nothing new upstream: 0 package requests" in out
    assert "nvidia-ctk version 1.17.8 (gpu-airgap stand-in)" in out
    assert "CONFIG_VERSION=2\n" in out.replace("    ", "") and "HANDLER=nvidia" in out
    assert "containerd config after uninstall identical to the original: True" in out
