"""CDI devices reach the container: the spec ``configure cdi`` writes, NVIDIA's runtime in ``cdi`` mode.

The node has stand-in character devices (``/dev/nvidia0`` 195:0, ``/dev/nvidiactl`` 195:255) and
the node files gpu-airgap writes: containerd's config (``--cdi``), ``/etc/cdi/nvidia.yaml`` and
``/etc/nvidia-container-runtime/config.toml`` (``mode = "cdi"``), which NVIDIA's runtime reads at
its real path. A container of handler ``nvidia`` that asks for ``nvidia.com/gpu=all`` through
``NVIDIA_VISIBLE_DEVICES`` sees the GPU; only NVIDIA's runtime reads that variable, so the device
is proof the container went through it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli_runner import run_cli
from tests.live import nvidia
from tests.live.cri import CriClient, CriError
from tests.live.image import LocalImage
from tests.live.nodes import char_devices, seed_node, start_containerd

pytestmark = pytest.mark.slow

ALL_GPUS = {"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=all"}
LIST_DEVICES = ["/bin/sh", "-c", "ls -l /dev/nvidia* 2>&1; true"]
SPEC = "etc/cdi/nvidia.yaml"


def cdi_node(node: Path, image: LocalImage, toolkit: Path) -> Path:
    """A node with one stand-in GPU, configured for CDI by gpu-airgap's commands."""
    seed_node(node, image)
    nvidia.make_gpu_nodes(node)
    nvidia.install_binaries(node, toolkit)
    for argv in (["containerd", "--cdi"], ["toolkit", "--mode", "cdi"], ["cdi"]):
        result = run_cli("configure", *argv, "--root", str(node))
        assert result.exit_code == 0, result.stderr
    return node


def test_a_pod_of_handler_nvidia_asking_for_all_gpus_sees_dev_nvidia0(
    tmp_path: Path, image: LocalImage, toolkit: Path, cri: None
) -> None:
    node = cdi_node(tmp_path / "node", image, toolkit)
    verified = run_cli("configure", "verify", "--root", str(node))
    assert verified.exit_code == 0, verified.stdout
    assert f"ok: /{SPEC}: every device node and mount it names exists" in verified.stdout.splitlines()

    daemon = start_containerd(node, image)
    client = CriClient(daemon.socket, tmp_path / "logs", daemon.cgroup_parent)
    try:
        pod, config = client.run_pod("nvidia")
        asked = client.run_container(pod, config, image.ref, LIST_DEVICES, env=ALL_GPUS)
        assert asked.exit_code == 0
        assert char_devices(asked.log) == {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255)}, asked.log

        not_asked = client.run_container(pod, config, image.ref, LIST_DEVICES)
        assert char_devices(not_asked.log) == {}, not_asked.log

        # the node admin's check asks for the GPUs too; a device the spec lacks fails it
        verify = ["configure", "verify", "--root", str(node), "--live", "--address", str(daemon.socket)]
        live = run_cli(*verify, "--visible-devices", "nvidia.com/gpu=all")
        assert live.exit_code == 0, live.stdout + live.stderr
        absent = run_cli(*verify, "--visible-devices", "nvidia.com/gpu=7")
        assert absent.exit_code == 9 and "unresolvable CDI devices nvidia.com/gpu=7" in absent.stdout

        # runc ignores the variable: the device came from NVIDIA's runtime, not from containerd
        runc_pod, runc_config = client.run_pod("runc")
        plain = client.run_container(runc_pod, runc_config, image.ref, LIST_DEVICES, env=ALL_GPUS)
        assert char_devices(plain.log) == {}, plain.log
    finally:
        client.close()
        daemon.stop()


def test_verify_catches_a_wrong_kind_and_a_missing_device_that_would_fail_the_container(
    tmp_path: Path, image: LocalImage, toolkit: Path, cri: None
) -> None:
    node = cdi_node(tmp_path / "node", image, toolkit)
    spec_path = node / SPEC
    good = yaml.safe_load(spec_path.read_text())
    wrong_kind = dict(good, kind="example.com/gpu")
    missing = dict(
        good,
        devices=[
            *good["devices"][:-1],
            {
                "name": "1",
                "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1", "hostPath": "/dev/nvidia1"}]},
            },
            {
                "name": "all",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"},
                        {"path": "/dev/nvidia1", "hostPath": "/dev/nvidia1"},
                    ]
                },
            },
        ],
    )
    cases = [
        (
            wrong_kind,
            "kind is 'example.com/gpu', not 'nvidia.com/gpu'",
            "unresolvable CDI devices nvidia.com/gpu=all",
        ),
        (missing, "/dev/nvidia1 does not exist on the node", "/dev/nvidia1"),
    ]
    for spec, problem, _failure in cases:  # verify first: no container is tried yet
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        verified = run_cli("configure", "verify", "--root", str(node))
        assert verified.exit_code == 9
        assert any(problem in line for line in verified.stdout.splitlines() if line.startswith("PROBLEM:")), (
            verified.stdout
        )

    # ...and what verify caught is what breaks the container: the runtime refuses both specs
    daemon = start_containerd(node, image)
    client = CriClient(daemon.socket, tmp_path / "logs", daemon.cgroup_parent)
    try:
        pod, config = client.run_pod("nvidia")
        for spec, _problem, failure in cases:
            spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
            with pytest.raises(CriError, match=failure):
                client.run_container(pod, config, image.ref, LIST_DEVICES, env=ALL_GPUS)
        spec_path.write_text(yaml.safe_dump(good, sort_keys=False))
        fixed = client.run_container(pod, config, image.ref, LIST_DEVICES, env=ALL_GPUS)
        assert "/dev/nvidia0" in char_devices(fixed.log)
    finally:
        client.close()
        daemon.stop()
