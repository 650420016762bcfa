"""Issue 14 item 5: restart and rollback through real systemd, on a booted node.

A minimal Debian with systemd, containerd, python3 and gpg (:mod:`tests.live.booted`) is booted
with systemd as PID 1; containerd runs there as Debian's own unit. The admin's steps are followed
inside the node: take the node files out of the signed bundle (``deb_bundle``: real dpkg, real
bundle, stand-in package contents) and run the node zipapp from it. Whether containerd came back
with the runtime is asked of the running daemon (CRI ``Status``), not of the file.

A config that containerd cannot start with is made real by a site drop-in that refuses to start
containerd while its config names NVIDIA's runtime (an ``ExecStartPre`` check, as a site might
gate its engine): systemd then reports the unit failed, exactly as for a daemon that exits.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.nodecheck import NODE_TOOL
from plumbing.errors import ExitCode
from tests.gpgkeys import TestKey
from tests.live import booted

pytestmark = pytest.mark.slow

NODE_DIR = booted.NODE_DIR
CONFIG = "/etc/containerd/config.toml"


@pytest.fixture
def node(
    booted_tarball: Path, tmp_path: Path, deb_bundle: Path, operator_key: TestKey
) -> Iterator[booted.BootedNode]:
    """A booted node with the bundle, the operator's key and the node files in /root/node."""
    with booted.BootedNode(tmp_path / "node", booted_tarball) as running:
        booted.hand_over(running, deb_bundle, operator_key.public)
        yield running


def _tool(node: booted.BootedNode, *args: str) -> subprocess.CompletedProcess[str]:
    """The node zipapp from the bundle, run by the node's own python3 inside the node."""
    return node.run("python3", f"{NODE_DIR}/{NODE_TOOL}", *args, check=False)


def _install(node: booted.BootedNode, *extra: str) -> subprocess.CompletedProcess[str]:
    return _tool(
        node,
        "install",
        f"{NODE_DIR}/bundle.tar.zst",
        "--keyring",
        f"{NODE_DIR}/operator.asc",
        "--runtime",
        "containerd",
        "--cdi",
        "off",
        "--json",
        *extra,
    )


def _handlers(node: booted.BootedNode, tmp_path: Path) -> set[str]:
    return booted.runtime_handlers(node, tmp_path / "cri-logs")


def _gate(node: booted.BootedNode) -> None:
    booted.gate_containerd(node)


def test_install_restarts_containerd_through_systemd_and_it_serves_the_nvidia_handler_and_a_rerun_leaves_it_be(
    node: booted.BootedNode, tmp_path: Path, cri: None
) -> None:
    before = node.main_pid("containerd")
    assert "nvidia" not in _handlers(node, tmp_path)

    installed = _install(node)
    assert installed.returncode == 0, installed.stderr
    result = json.loads(installed.stdout)
    assert result["engines"]["containerd"] == "registered runtime 'nvidia', restarted containerd"
    assert result["restart_pending"] == []
    after = node.main_pid("containerd")
    assert after not in (0, before) and node.active_state("containerd") == "active"
    assert "nvidia" in _handlers(node, tmp_path)

    # the same install again changes nothing: the file keeps its bytes and containerd is not restarted
    written = node.path(CONFIG).read_bytes()
    again = _install(node)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["engines"]["containerd"] == "runtime 'nvidia' already registered"
    assert node.path(CONFIG).read_bytes() == written and node.main_pid("containerd") == after


@pytest.mark.parametrize("how", ["install", "install --no-restart, then restart"])
def test_a_config_containerd_cannot_start_with_is_rolled_back_and_containerd_runs_on_the_previous_one(
    node: booted.BootedNode, tmp_path: Path, cri: None, how: str
) -> None:
    original = node.path(CONFIG).read_bytes()
    _gate(node)
    if how == "install":
        failed = _install(node)
    else:
        deferred = _install(node, "--no-restart")
        assert deferred.returncode == 0, deferred.stderr
        assert json.loads(deferred.stdout)["restart_pending"] == ["containerd"]
        assert b"nvidia-container-runtime" in node.path(CONFIG).read_bytes()
        assert node.active_state("containerd") == "active"  # nothing restarted it yet
        failed = _tool(node, "restart", "--json")

    assert failed.returncode == ExitCode.ENGINE_RESTORED, failed.stderr
    assert failed.stderr.strip().splitlines()[-1] == (
        "gpu-airgap: error: containerd did not come back after registering the runtime, so the previous "
        "configuration was restored; the packages stay installed (see `gpu-airgap status`)"
    )
    assert "Traceback" not in failed.stderr
    assert node.path(CONFIG).read_bytes() == original
    assert node.active_state("containerd") == "active"
    assert "nvidia" not in _handlers(node, tmp_path)
    status = json.loads(_tool(node, "status", "--json").stdout)
    assert status["restart_pending"] == []


def test_install_no_restart_leaves_containerd_running_and_restart_brings_the_handler(
    node: booted.BootedNode, tmp_path: Path, cri: None
) -> None:
    before = node.main_pid("containerd")
    deferred = _install(node, "--no-restart")
    assert deferred.returncode == 0, deferred.stderr
    assert node.main_pid("containerd") == before
    assert "nvidia" not in _handlers(node, tmp_path)  # the file has it, the daemon not yet

    restarted = _tool(node, "restart", "--json")
    assert restarted.returncode == 0, restarted.stderr
    assert json.loads(restarted.stdout)["engines"]["containerd"].endswith("restarted containerd")
    assert node.main_pid("containerd") not in (0, before)
    assert "nvidia" in _handlers(node, tmp_path)
    again = json.loads(_tool(node, "restart", "--json").stdout)
    assert again["outcome"] == "nothing to restart"


def test_install_and_uninstall_leave_a_containerd_the_admin_had_stopped_stopped(
    node: booted.BootedNode, tmp_path: Path, cri: None
) -> None:
    original = node.path(CONFIG).read_bytes()
    node.run("systemctl", "stop", "containerd")
    installed = _install(node)
    assert installed.returncode == 0, installed.stderr
    result = json.loads(installed.stdout)
    assert node.active_state("containerd") == "inactive"
    assert "it was stopped" in result["engines"]["containerd"], result
    assert result["restart_pending"] == []
    node.run("systemctl", "start", "containerd")  # the admin starts it: it comes up with the runtime
    assert "nvidia" in _handlers(node, tmp_path)

    node.run("systemctl", "stop", "containerd")
    removed = _tool(node, "uninstall", "--json")
    assert removed.returncode == 0, removed.stderr
    assert node.active_state("containerd") == "inactive" and node.path(CONFIG).read_bytes() == original
