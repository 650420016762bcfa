"""NVIDIA's real 1.20.0 packages installed on a node booted with systemd (issue 14 item 5).

The bundle is the real-packages profile (``tests.test_real_packages``: NVIDIA's own
``nvidia-container-toolkit`` and ``-base`` debs, synced and signed like any release). On a booted
node their maintainer scripts meet a running systemd for the first time: the base package's
postinst enables ``nvidia-cdi-refresh.path``/``.service`` with deb-systemd-helper and starts them
with deb-systemd-invoke. Without a driver the service's conditions skip it, so the path unit is
what stays active. The node tool restarts containerd, which then serves the ``nvidia`` handler:
a CRI pod with that handler runs under the node's systemd-managed containerd, and the debug log of
NVIDIA's runtime (enabled with its own ``nvidia-ctk config --set``) names the pod and its container.
Uninstall stops and disables NVIDIA's units (prerm) and containerd comes back without the handler.

The node's containerd config starts as a node admin's with this machine's site settings (a local
sandbox image, ``restrict_oom_score_adj``: see :mod:`tests.live.nodes`), and the node's cgroup
controllers are made writable for runc (:meth:`tests.live.booted.BootedNode.allow_pods`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.nodecheck import NODE_TOOL
from tests.gpgkeys import TestKey
from tests.live import booted, nvidia
from tests.live.cri import CriClient, CriError
from tests.live.image import LocalImage
from tests.live.nodes import MINIMAL
from tests.test_real_packages import VERSION, real_tree, sync_and_bundle  # noqa: F401 (fixture)
from tests.upstream import UpstreamTree

pytestmark = pytest.mark.slow

UNITS = ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service")
RUNTIME_LOG = "/var/log/nvidia-container-runtime.log"
POD_LOGS = Path("/var/log/gal-pods")


@pytest.fixture(scope="module")
def real_bundle(
    real_tree: UpstreamTree,  # noqa: F811
    operator_key: TestKey,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    return sync_and_bundle(real_tree, tmp_path_factory.mktemp("real-deb"), operator_key, "deb")


@pytest.fixture
def node(
    booted_tarball: Path, tmp_path: Path, real_bundle: Path, operator_key: TestKey, image: LocalImage
) -> Iterator[booted.BootedNode]:
    """A booted node with the admin's containerd config, the local image imported and writable cgroups."""
    with booted.BootedNode(tmp_path / "node", booted_tarball) as running:
        booted.hand_over(running, real_bundle, operator_key.public)
        running.path("/etc/containerd/config.toml").write_text(MINIMAL.format(image=image.ref))
        running.run("systemctl", "restart", "containerd")
        running.path("/root/image.tar").write_bytes(image.archive.read_bytes())
        running.run("ctr", "-n", "k8s.io", "images", "import", "/root/image.tar")
        running.allow_pods()
        yield running


def _tool(node: booted.BootedNode, *args: str) -> subprocess.CompletedProcess[str]:
    return node.run("python3", f"{booted.NODE_DIR}/{NODE_TOOL}", *args, check=False)


def _unit_states(node: booted.BootedNode) -> dict[str, tuple[str, str]]:
    """``{unit: (is-enabled, is-active)}`` as the node's systemd answers."""
    return {
        unit: (node.run("systemctl", "is-enabled", unit, check=False).stdout.strip(), node.active_state(unit))
        for unit in UNITS
    }


def test_nvidias_packages_meet_a_running_systemd_and_a_pod_runs_through_their_runtime(
    node: booted.BootedNode, tmp_path: Path, image: LocalImage, cri: None
) -> None:
    before = node.main_pid("containerd")
    installed = _tool(
        node,
        "install",
        f"{booted.NODE_DIR}/bundle.tar.zst",
        "--keyring",
        f"{booted.NODE_DIR}/operator.asc",
        "--runtime",
        "containerd",
        "--cdi",
        "off",
        "--json",
    )
    assert installed.returncode == 0, installed.stderr
    result = json.loads(installed.stdout)
    assert result["engines"]["containerd"] == "registered runtime 'nvidia', restarted containerd", result
    ctk = node.run("nvidia-ctk", "--version").stdout
    assert ctk.startswith(f"NVIDIA Container Toolkit CLI version {VERSION}"), ctk
    # NVIDIA's postinst under a running systemd: both units enabled; the path unit watches, the
    # service is skipped by its conditions (no nvidia-smi, no driver module), so it is not failed
    states = _unit_states(node)
    assert states["nvidia-cdi-refresh.path"] == ("enabled", "active"), states
    assert (
        states["nvidia-cdi-refresh.service"][0] == "enabled"
        and states["nvidia-cdi-refresh.service"][1] != "failed"
    ), states
    assert node.main_pid("containerd") not in (0, before)
    assert "nvidia" in booted.runtime_handlers(node, tmp_path / "cri-logs")
    runtime = node.run("nvidia-container-runtime", "--version").stdout
    assert f"NVIDIA Container Runtime version {VERSION}" in runtime, runtime
    node.run(
        "nvidia-ctk",
        "config",
        "--in-place",
        "--set",
        f"nvidia-container-runtime.debug={RUNTIME_LOG}",
        "--set",
        "nvidia-container-runtime.log-level=debug",
    )

    client = CriClient(node.socket(booted.CONTAINERD_SOCKET), POD_LOGS, node.pod_cgroup, node_root=node.root)
    try:
        pod, config = client.run_pod("nvidia")
        run = client.run_container(pod, config, image.ref, ["/bin/sh", "-c", "echo started in $(hostname)"])
        assert (run.state, run.exit_code) == ("CONTAINER_EXITED", 0), run
        assert "started in" in run.log
        handled = nvidia.handled_bundles(node.path(RUNTIME_LOG))
        assert any(b.endswith("/k8s.io/" + pod) for b in handled), handled  # the sandbox went through it
        assert any(b.endswith("/k8s.io/" + run.container_id) for b in handled), handled
        with pytest.raises(CriError, match='no runtime for "nvidia-missing" is configured'):
            client.run_pod("nvidia-missing")
        client.remove_all_pods()
    finally:
        client.close()

    removed = _tool(node, "uninstall", "--json")
    assert removed.returncode == 0, removed.stderr
    assert not node.path("/usr/bin/nvidia-ctk").exists()
    assert all(active == "inactive" for _, active in _unit_states(node).values()), _unit_states(node)
    assert node.active_state("containerd") == "active"
    assert "nvidia" not in booted.runtime_handlers(node, tmp_path / "cri-logs")
