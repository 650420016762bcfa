"""``make demo`` runs the whole pipeline end to end and exits by itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_node_debootstrap import CACHE, _missing_prerequisite

PROJECT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_runs_sync_bundle_install_configure_report_and_uninstall(tmp_path: Path) -> None:
    if _missing_prerequisite():  # the demo installs into the minimal Debian root
        pytest.skip(_missing_prerequisite())
    result = subprocess.run(
        [sys.executable, "-m", "tests.demo"],
        cwd=tmp_path,
        env={
            "PYTHONPATH": str(PROJECT),
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(tmp_path),
            "GPU_AIRGAP_TEST_CACHE": str(CACHE.parent),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "re-sync with nothing new upstream: 0 package requests" in out
    assert "NVIDIA Container Toolkit CLI version 1.20.0\n" in out  # NVIDIA's nvidia-ctk, run inside the node
    assert "CONFIG_VERSION=2\n" in out.replace("    ", "") and "HANDLER=nvidia" in out
    assert "containerd config after uninstall identical to the original: True" in out
