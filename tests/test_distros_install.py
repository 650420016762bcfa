"""install, status and uninstall on Kubernetes distributions and on GPU Operator nodes (real signed bundles, real dpkg)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import pytest

from configure.journal import Journal
from installer import install as install_mod
from installer import manage as manage_mod
from installer.env import NodeEnv
from installer.install import install
from installer.plan import InstallOptions
from installer.target import StagedTarget
from plumbing.errors import ManagedByOperator
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import build_target, seed_dpkg_root, tree_digest, write_signed_bundle
from tests.test_distros import FIXTURES, K3S


class Services:
    """A service manager that records; ``active`` are the units that run."""

    def __init__(self, active: Tuple[str, ...], on_restart: Optional[Callable[[str], None]] = None) -> None:
        self.active = active
        self.on_restart = on_restart
        self.calls: List[Tuple[str, str]] = []

    def restart(self, unit: str) -> None:
        self.calls.append(("restart", unit))
        if self.on_restart is not None:
            self.on_restart(unit)

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


def _k3s_node_before_the_toolkit(tmp_path: Path) -> Path:
    """A k3s node whose agent has not yet seen NVIDIA's runtime: its config.toml as generated then, no template."""
    root = _node(tmp_path, "k3s-v3")
    shutil.copy(
        FIXTURES / "k3s-v3/_before-toolkit" / K3S.lstrip("/") / "config.toml",
        root / K3S.lstrip("/") / "config.toml",
    )
    (root / K3S.lstrip("/") / "config-v3.toml.tmpl").unlink()
    return root


def test_install_on_k3s_writes_no_containerd_file_and_restarts_the_running_k3s_unit(
    tmp_path: Path, target: StagedTarget, test_key: TestKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _k3s_node_before_the_toolkit(tmp_path)
    bundle = write_signed_bundle(tmp_path / "b.tar", [target], test_key.home, test_key.fingerprint)

    def agent_restart(
        unit: str,
    ) -> None:  # what k3s does at start: regenerate config.toml with the runtime it finds
        shutil.copy(
            FIXTURES / "k3s-v3" / K3S.lstrip("/") / "config.toml", root / K3S.lstrip("/") / "config.toml"
        )

    services = Services(active=("k3s-agent",), on_restart=agent_restart)
    monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)  # restart as on a real node
    result = install(bundle, test_key.public, InstallOptions(root=root), NodeEnv(services=services))
    assert "its regenerated config has the nvidia handler" in result.engines["containerd"]
    assert ("restart", "k3s-agent") in services.calls and ("restart", "containerd") not in services.calls
    assert result.restart_units == {
        "containerd": ["k3s", "k3s-agent"]
    }  # what the DaemonSet's --tools image restarts
    assert "k3s registers runtime 'nvidia' itself" in result.engines["containerd"]
    assert not [
        e for e in Journal(root).entries() if e.engine == "containerd"
    ]  # config.toml written by the "agent" only
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
    forced = install(
        bundle, test_key.public, InstallOptions(root=root, force=True), NodeEnv(services=Services(()))
    )
    assert forced.outcome == "installed"
    assert any("taking the runtime configuration over" in m for m in forced.messages)


def test_install_and_uninstall_on_microk8s_edit_the_template_and_restore_it_byte_for_byte(
    tmp_path: Path, target: StagedTarget, test_key: TestKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _node(tmp_path, "microk8s")
    template = root / "var/snap/microk8s/current/args/containerd-template.toml"
    before = template.read_bytes()
    bundle = write_signed_bundle(tmp_path / "b.tar", [target], test_key.home, test_key.fingerprint)
    services = Services(active=("snap.microk8s.daemon-containerd",))
    monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)
    monkeypatch.setattr(manage_mod, "is_live_root", lambda root: True)
    install(bundle, test_key.public, InstallOptions(root=root), NodeEnv(services=services))
    assert b"runtimes.nvidia]" in template.read_bytes()
    assert ("restart", "snap.microk8s.daemon-containerd") in services.calls
    status = manage_mod.status(root, NodeEnv(services=services))
    assert (status["engines"]["containerd"]["DISTRO"], status["engines"]["containerd"]["RUNTIME"]) == (
        "microk8s",
        "nvidia",
    )
    services.calls.clear()
    manage_mod.uninstall(root, NodeEnv(services=services))
    assert template.read_bytes() == before
    assert services.calls == [("restart", "snap.microk8s.daemon-containerd")]


def test_a_k3s_restart_whose_config_lacks_the_handler_is_reported(
    tmp_path: Path, target: StagedTarget, test_key: TestKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _k3s_node_before_the_toolkit(tmp_path)
    bundle = write_signed_bundle(tmp_path / "b.tar", [target], test_key.home, test_key.fingerprint)
    monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)
    result = install(
        bundle, test_key.public, InstallOptions(root=root), NodeEnv(services=Services(active=("k3s",)))
    )
    assert any("k3s restarted but its regenerated config has no nvidia handler" in m for m in result.messages)


def test_status_with_distro_reads_the_chosen_containerd_on_a_node_with_two(tmp_path: Path) -> None:
    root = _node(tmp_path, "k3s-v3")
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text('version = 2\ndisabled_plugins = ["cri"]\n')
    ambiguous = manage_mod.status(root, NodeEnv(services=Services(())))
    assert "several containerd instances" in ambiguous["engines"]["containerd"]["error"]
    chosen = manage_mod.status(root, NodeEnv(services=Services(())), distro="k3s")
    assert (chosen["engines"]["containerd"]["DISTRO"], chosen["engines"]["containerd"]["RUNTIME"]) == (
        "k3s",
        "nvidia",
    )
    cli = run_cli("status", "--root", str(root), "--distro", "k3s")
    assert "containerd of k3s: runtime nvidia" in cli.stdout, cli.stdout + cli.stderr
