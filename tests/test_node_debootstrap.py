"""End to end: install a real signed bundle into a minimal Debian made with debootstrap, run nvidia-ctk in it.

debootstrap needs a Debian mirror, and this project's machines have no internet and no local
Debian mirror. The test therefore runs only when ``GPU_AIRGAP_DEBIAN_MIRROR`` names one (an
``http://127.0.0.1:...`` mirror or a ``file:///`` path); otherwise it is reported as skipped with
that reason (``pytest -ra`` lists it). README.md "Install on the air-gapped node" says how to run it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from installer.env import NodeEnv
from installer.install import InstallOptions, install
from installer.manage import uninstall
from installer.target import Target
from tests.gpgkeys import TestKey, test_key  # noqa: F401 - fixture
from tests.node_fixtures import TOOLKIT, build_target, write_signed_bundle

MIRROR = os.environ.get("GPU_AIRGAP_DEBIAN_MIRROR", "")
SUITE = os.environ.get("GPU_AIRGAP_DEBIAN_SUITE", "bookworm")


@pytest.fixture(scope="module")
def debian_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MIRROR:
        pytest.skip("set GPU_AIRGAP_DEBIAN_MIRROR to a reachable Debian mirror to run the debootstrap end-to-end test (none here: no internet)")
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        pytest.skip("the debootstrap end-to-end test needs debootstrap and root")
    root = tmp_path_factory.mktemp("debian") / "root"
    subprocess.run(
        ["debootstrap", "--variant=minbase", SUITE, str(root), MIRROR], check=True, capture_output=True, timeout=1800
    )
    return root


@pytest.mark.slow
def test_install_into_debootstrapped_debian_and_run_nvidia_ctk(tmp_path: Path, debian_root: Path, test_key: TestKey) -> None:  # noqa: F811
    targets: Dict[str, Target] = {"deb": build_target(tmp_path / "pkgs", "deb", "1.17.8-1", "amd64")}
    bundle = write_signed_bundle(tmp_path / "bundle.tar", [targets["deb"]], test_key.home, test_key.fingerprint)
    result = install(bundle, test_key.public, InstallOptions(root=debian_root), NodeEnv())
    assert result.outcome == "installed", result
    query = subprocess.run(
        ["chroot", str(debian_root), "dpkg-query", "-W", "-f=${Package} ${Version}\n", *TOOLKIT],
        check=True, capture_output=True, text=True,
    ).stdout.split("\n")
    assert sorted(filter(None, query)) == sorted(f"{n} 1.17.8-1" for n in TOOLKIT)
    ctk = subprocess.run(["chroot", str(debian_root), "nvidia-ctk", "--version"], check=True, capture_output=True, text=True)
    assert ctk.stdout.startswith("nvidia-ctk version 1.17.8")
    uninstall(debian_root, NodeEnv())
    assert not (debian_root / "usr/bin/nvidia-ctk").exists()
