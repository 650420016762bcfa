"""Session fixtures of the live tests: the local image, NVIDIA's binaries, the CRI stubs, node roots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.live import booted, nvidia
from tests.live.cri import cri_modules
from tests.live.image import LocalImage, busybox_image


@pytest.fixture(autouse=True)
def _root_only() -> None:
    """Engines, mount namespaces and device nodes need root; CI (a clean Debian 12) runs as root."""
    if os.geteuid() != 0:
        pytest.skip("live engine tests need root")


@pytest.fixture(scope="session")
def image() -> LocalImage:
    """The busybox image (also the sandbox image), built once and cached."""
    return busybox_image()


@pytest.fixture(scope="session")
def toolkit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NVIDIA's real 1.20.0 binaries (``usr/bin`` of both packages, unpacked once per session)."""
    return nvidia.extract_toolkit(tmp_path_factory.mktemp("nvidia-toolkit"))


@pytest.fixture(scope="session")
def cri() -> None:
    """Generate (or load) the CRI stubs once, before the first test times itself."""
    cri_modules()


@pytest.fixture(scope="session")
def booted_tarball() -> Path:
    """The root of a node booted with systemd (:mod:`tests.live.booted`), debootstrapped once and cached."""
    reason = booted.missing_reason()
    if reason:
        pytest.skip(reason)
    return booted.node_tarball()
