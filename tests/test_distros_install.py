"""install, status and uninstall on Kubernetes distributions and on GPU Operator nodes (real signed bundles, real dpkg)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List, Tuple

import pytest

from installer import install as install_mod
from installer import manage as manage_mod
from installer.env import NodeEnv
from installer.install import install
from installer.plan import InstallOptions
from installer.target import StagedTarget
from plumbing.errors import ManagedByOperator
from tests.gpgkeys import TestKey
from tests.node_fixtures import build_target, seed_dpkg_root, tree_digest, write_signed_bundle
from tests.test_distros import FIXTURES, K3S


class Services:
    """A service manager that records; ``active`` are the units that run."""

    def __init__(self, active: Tuple[str, ...]) -> None:
        self.active = active
        self.calls: List[Tuple[str, str]] = []

    def restart(self, unit: str) -> None:
        self.calls.append(("restart", unit))

    def is_active(self, unit: str) -> bool:
        return unit in self.active

    def is_stopped(self, unit: str) -> bool:
        return False  # no admin stopped an engine here (tests/live/test_systemd_node.py has that case)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> StagedTarget:
    return build_target(tmp_path_factory.mktemp("distro-packages"), "deb", "1.17.8-1", "amd64")


def _node(tmp_path: Path, fixture: str) -> Path:
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / fixture, root, ignore=shutil.ignore_patterns("_*"))
    seed_dpkg_root(root)
    return root


def test_install_on_k3s_writes_no_containerd_file_and_restarts_the_running_k3s_unit(
    tmp_path: Path, target: StagedTarget, test_key: TestKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _node(tmp_path, "k3s-v3")
    shutil.copy(FIXTURES / "k3s-v3/_before-toolkit" / K3S.lstrip("/") / "config.toml", root / K3S.lstrip("/") / "config.toml")
    (root / K3S.lstrip("/") / "config-v3.toml.tmpl").unlink()
    generated = (root / K3S.lstrip("/") / "config.toml").read_bytes()
    bundle = write_signed_bundle(tmp_path / "b.tar", [target], test_key.home, test_key.fingerprint)
    services = Services(active=("k3s-agent",))
    monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)  # restart as on a real node
    result = install(bundle, test_key.public, InstallOptions(root=root), NodeEnv(services=services))
    assert ("restart", "k3s-agent") in services.calls and ("restart", "containerd") not in services.calls
    assert "k3s registers runtime 'nvidia' itself" in result.engines["containerd"]
    assert (root / K3S.lstrip("/") / "config.toml").read_bytes() == generated
    assert not list((root / K3S.lstrip("/")).glob("*.tmpl")) and not (root / "etc/containerd").exists()
    status = manage_mod.status(root, NodeEnv(services=services))
    assert status["engines"]["containerd"]["DISTRO"] == "k3s" and status["owner"] is None


def test_install_on_a_gpu_operator_node_is_refused_before_any_package(
    tmp_path: Path, target: StagedTarget, test_key: TestKey
) -> None:
    root = _node(tmp_path, "gpu-operator")
    shutil.rmtree(root / "var/lib/rancher")
    bundle = write_signed_bundle(tmp_path / "b.tar", [target], test_key.home, test_key.fingerprint)
    before = tree_digest(root)
    with pytest.raises(ManagedByOperator) as info:
        install(bundle, test_key.public, InstallOptions(root=root), NodeEnv(services=Services(())))
    assert "managed by the NVIDIA GPU Operator" in str(info.value) and "--force" in str(info.value)
    assert tree_digest(root) == before
    status = manage_mod.status(root, NodeEnv(services=Services(())))
    assert status["owner"] == "the NVIDIA GPU Operator"
    forced = install(bundle, test_key.public, InstallOptions(root=root, force=True), NodeEnv(services=Services(())))
    assert forced.outcome == "installed"
    assert any("taking the runtime configuration over" in m for m in forced.messages)
