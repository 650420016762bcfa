"""containerd 1.6 + CRI: a pod with runtime handler ``nvidia`` runs through NVIDIA's real runtime.

The node is the docs/node.md walk-through's: ``config.toml.base`` with this machine's site settings,
then ``gpu-airgap configure containerd`` / ``runtimeclass``; containerd reads that file unchanged
(in a node view, see :mod:`tests.live.nodeview`). NVIDIA's ``nvidia-container-runtime`` 1.20.0
sits at the configured ``BinaryName``; its debug log names each OCI bundle it handled on
``create``, which proves that the sandbox and the container went through it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.cli_runner import run_cli
from tests.live import nvidia
from tests.live.cri import CriClient, CriError
from tests.live.image import LocalImage
from tests.live.nodes import seed_node, start_containerd

pytestmark = pytest.mark.slow

RUNTIMECLASS = "/etc/kubernetes/runtimeclass-nvidia.yaml"


def walkthrough(node: Path) -> str:
    """The README's node steps; returns the RuntimeClass handler the manifest names."""
    configured = run_cli("configure", "containerd", "--root", str(node))
    assert configured.exit_code == 0, configured.stderr
    written = run_cli("configure", "runtimeclass", "--root", str(node), "--output", RUNTIMECLASS)
    assert written.exit_code == 0, written.stderr
    report = run_cli("configure", "report", "--root", str(node), "--all").stdout.splitlines()
    assert "RUNTIME=nvidia" in report and "HANDLER=nvidia" in report and "DEFAULT=runc" in report
    return str(yaml.safe_load((node / RUNTIMECLASS.lstrip("/")).read_text())["handler"])


def test_seed_walkthrough_ends_with_a_pod_on_handler_nvidia_that_starts(
    tmp_path: Path, image: LocalImage, toolkit: Path, cri: None
) -> None:
    node = tmp_path / "node"
    config = seed_node(node, image)
    handler = walkthrough(node)
    assert handler == "nvidia"
    nvidia.install_binaries(node, toolkit)
    verified = run_cli("configure", "verify", "--root", str(node))
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    written = config.read_bytes()

    daemon = start_containerd(node, image, tmp_path / "runtime.log")
    client = CriClient(daemon.socket, tmp_path / "logs", daemon.cgroup_parent)
    try:
        assert "DefaultRuntimeName:runc" in daemon.log_tail(100_000)
        pod, pod_config = client.run_pod(handler)
        assert client.pod_state(pod) == "SANDBOX_READY"
        run = client.run_container(
            pod, pod_config, image.ref, ["/bin/sh", "-c", "echo started in $(hostname)"]
        )
        assert (run.state, run.exit_code) == ("CONTAINER_EXITED", 0), run
        assert "started in" in run.log
        handled = nvidia.handled_bundles(tmp_path / "runtime.log")
        # the sandbox (pause) and the container were both created by NVIDIA's runtime
        assert any(b.endswith("/k8s.io/" + pod) for b in handled), handled
        assert any(b.endswith("/k8s.io/" + run.container_id) for b in handled), handled

        # runc, the default, does not go through it: the log proves the handler, not the daemon
        runc_pod, runc_config = client.run_pod("runc")
        runc_run = client.run_container(runc_pod, runc_config, image.ref, ["/bin/true"])
        assert runc_run.exit_code == 0
        assert not any(runc_run.container_id in b for b in nvidia.handled_bundles(tmp_path / "runtime.log"))

        # a handler containerd was not given is refused: this check can fail
        with pytest.raises(CriError, match='no runtime for "nvidia-missing" is configured'):
            client.run_pod("nvidia-missing")
    finally:
        client.close()
        daemon.stop()
    assert config.read_bytes() == written  # containerd ran the file gpu-airgap wrote, byte for byte


def test_a_wrong_binary_name_fails_the_pod_and_verify(
    tmp_path: Path, image: LocalImage, toolkit: Path, cri: None
) -> None:
    node = tmp_path / "node"
    seed_node(node, image)
    nvidia.install_binaries(node, toolkit)
    wrong = "/usr/local/bin/nvidia-container-runtime"  # nothing there on this node
    configured = run_cli("configure", "containerd", "--root", str(node), "--runtime-path", wrong)
    assert configured.exit_code == 0, configured.stderr
    verified = run_cli("configure", "verify", "--root", str(node))
    assert verified.exit_code == 9
    assert f"the runtime binary {wrong} does not exist" in verified.stdout

    daemon = start_containerd(node, image, tmp_path / "runtime.log")
    client = CriClient(daemon.socket, tmp_path / "logs", daemon.cgroup_parent)
    try:
        with pytest.raises(CriError, match=re.escape(wrong)):
            client.run_pod("nvidia")
        assert nvidia.handled_bundles(tmp_path / "runtime.log") == []
    finally:
        client.close()
        daemon.stop()
