"""``gpu-airgap install`` registers a handler that a CRI pod runs through, and its CDI spec reaches the pod.

The bundle is the tests' signed stand-in bundle (``deb_bundle``: real dpkg, real bundle, stand-in
package contents). Its ``nvidia-container-runtime`` is a shell script, so NVIDIA's real 1.20.0
binary is put at the ``BinaryName`` install configured. When the real-packages upstream profile
lands, this test should install NVIDIA's packages instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.live import nvidia
from tests.live.cri import CriClient, CriError
from tests.live.image import LocalImage
from tests.live.nodes import char_devices, minimal_node_config, start_containerd
from tests.node_fixtures import seed_dpkg_root

pytestmark = pytest.mark.slow


def test_install_with_cdi_on_gives_a_pod_of_handler_nvidia_the_gpu(
    tmp_path: Path, deb_bundle: Path, operator_key: TestKey, image: LocalImage, toolkit: Path, cri: None
) -> None:
    node = tmp_path / "node"
    seed_dpkg_root(node)
    minimal_node_config(node, image)
    nvidia.make_gpu_nodes(node)  # a driver is present: --cdi on writes the spec from these
    installed = run_cli(
        "install",
        str(deb_bundle),
        "--keyring",
        str(operator_key.public),
        "--root",
        str(node),
        "--runtime",
        "containerd",
        "--cdi",
        "on",
        "--json",
    )
    assert installed.exit_code == 0, installed.stderr
    assert (node / "etc/cdi/nvidia.yaml").is_file()
    report = json.loads(run_cli("configure", "report", "--root", str(node), "--json").stdout)
    assert report["runtime"] == "nvidia" and report["cdi"] is True, report
    binary = node / report["runtime_path"].lstrip("/")
    assert "stand-in" in binary.read_text()  # what the stand-in package installed there
    nvidia.install_binaries(node, toolkit)
    assert (node / "usr/bin" / nvidia.RUNTIME).samefile(binary)
    moded = run_cli("configure", "toolkit", "--mode", "cdi", "--root", str(node))
    assert moded.exit_code == 0, moded.stderr
    verified = run_cli("configure", "verify", "--root", str(node))
    assert verified.exit_code == 0, verified.stdout

    daemon = start_containerd(node, image)
    client = CriClient(daemon.socket, tmp_path / "logs", daemon.cgroup_parent)
    try:
        pod, config = client.run_pod("nvidia")
        run = client.run_container(
            pod,
            config,
            image.ref,
            ["/bin/sh", "-c", "ls -l /dev/nvidia*"],
            env={"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=all"},
        )
        assert run.exit_code == 0, run
        assert char_devices(run.log)["/dev/nvidia0"] == (195, 0), run.log
    finally:
        client.close()
        daemon.stop()

    # uninstall puts the node's config back: containerd no longer has the handler
    removed = run_cli("uninstall", "--root", str(node))
    assert removed.exit_code == 0, removed.stderr
    daemon = start_containerd(node, image)
    client = CriClient(daemon.socket, tmp_path / "logs", daemon.cgroup_parent)
    try:
        with pytest.raises(CriError, match='no runtime for "nvidia" is configured'):
            client.run_pod("nvidia")
    finally:
        client.close()
        daemon.stop()
