"""``gpu-airgap configure verify --live`` against a real containerd: the check a node admin runs after install.

Debian 12 has no crictl, so containerd is checked through ``ctr`` with the registered runtime's
binary (the crictl path is covered by ``tests/test_configure_live.py``). NVIDIA's runtime logs each
container it creates, which shows the throwaway container went through it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.live import nvidia
from tests.live.image import LocalImage
from tests.live.nodes import seed_node, start_containerd

pytestmark = pytest.mark.slow


def test_verify_live_runs_a_container_through_the_runtime_and_catches_a_broken_runtime(
    tmp_path: Path, image: LocalImage, toolkit: Path
) -> None:
    node = tmp_path / "node"
    seed_node(node, image)
    assert run_cli("configure", "containerd", "--root", str(node)).exit_code == 0
    nvidia.install_binaries(node, toolkit)
    log = tmp_path / "runtime.log"
    daemon = start_containerd(node, image, log)
    try:
        verify = ["configure", "verify", "--root", str(node), "--live", "--address", str(daemon.socket)]
        ran = run_cli(*verify)
        assert ran.exit_code == 0, ran.stdout + ran.stderr
        assert ran.stdout.splitlines()[-1].startswith(
            f"ok: containerd: live: a container of {image.ref} started with runtime binary /usr/bin/nvidia-container-runtime through ctr"
        )  # the sandbox image the config names, found on the node
        assert [b for b in nvidia.handled_bundles(log) if "/k8s.io/gpu-airgap-live-" in b], (
            "not through NVIDIA's runtime"
        )
        left = daemon.ctr("containers", "ls", "-q").stdout.split()
        assert not [c for c in left if c.startswith("gpu-airgap-live-")]  # removed again

        absent = run_cli(*verify, "--image", "registry.invalid/cuda:12.4")
        assert absent.exit_code == 1
        assert (
            "CANNOT RUN: containerd: live: the image registry.invalid/cuda:12.4 is not on the node"
            in absent.stdout
        )

        # a runtime binary that is there but broken: the static checks pass, the live check does not
        with open(node / "usr/bin" / nvidia.RUNTIME, "w") as binary:  # in place: the daemon sees this inode
            binary.write("#!/bin/sh\necho 'nvidia-container-runtime: broken' >&2\nexit 1\n")
        static = run_cli("configure", "verify", "--root", str(node))
        assert static.exit_code == 0
        broken = run_cli(*verify)
        assert broken.exit_code == 9, broken.stdout
        assert broken.stdout.splitlines()[-1].startswith(
            "PROBLEM: containerd: live: a container with runtime binary"
        )
        assert "the live check failed for 1 engine(s)" in broken.stderr
    finally:
        daemon.stop()
