"""The set-up scripts ``make test`` and ``make demo`` run leave the machine's services alone."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install-system-tools"


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _run_with_stubs(tmp_path: Path, policy: Path) -> list[str]:
    """Run the script with every tool "missing" and stub apt-get/systemctl; return what they were asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record"
    for tool in ("sort", "chmod", "rm", "id", "cat"):
        os.symlink(shutil.which(tool) or f"/usr/bin/{tool}", bin_dir / tool)
    _stub(bin_dir, "apt-get", f'echo "apt-get $* policy=$({policy} >/dev/null 2>&1; echo $?)" >>{record}\n')
    _stub(bin_dir, "systemctl", f'echo "systemctl $*" >>{record}\n')
    _stub(bin_dir, "invoke-rc.d", f'echo "invoke-rc.d $*" >>{record}\n')
    env = {"PATH": str(bin_dir), "GPU_AIRGAP_POLICY_RC_D": str(policy)}
    result = subprocess.run(["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return record.read_text().splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="the script installs only as root")
def test_installing_tools_starts_no_service_and_stops_none(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    calls = _run_with_stubs(tmp_path, policy)
    installs = [line for line in calls if line.startswith("apt-get install")]
    assert installs and all(line.endswith("policy=101") for line in installs), calls  # no service may start
    assert [line for line in calls if not line.startswith("apt-get")] == []  # nothing stopped or disabled
    assert not policy.exists()  # the switch is gone again


@pytest.mark.skipif(os.geteuid() != 0, reason="the script installs only as root")
def test_a_policy_the_machine_already_has_is_kept(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n# the admin's\n")
    policy.chmod(0o755)
    _run_with_stubs(tmp_path, policy)
    assert policy.read_text().endswith("# the admin's\n")


def test_no_setup_script_stops_or_disables_a_service() -> None:
    top = SCRIPT.parents[1]
    texts = {
        p: p.read_text()
        for p in [*sorted((top / "scripts").iterdir()), top / "Makefile", top / ".ci" / "run"]
    }
    offending = [
        str(p)
        for p, text in texts.items()
        if any(f"systemctl {verb}" in text for verb in ("stop", "disable", "mask"))
    ]
    assert offending == []
