"""Install, reinstall, refuse, uninstall and status against scratch roots with real dpkg and rpm databases."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from configure.containerd.engine import ContainerdEngine
from configure.docker import DockerEngine
from configure.engine import ConfigPlan, RuntimeOptions
from configure.engines import get_engine
from installer.env import NodeEnv
from installer.install import InstallFailed, install
from installer.manage import status, uninstall
from installer.plan import InstallOptions
from installer.preflight import PreflightFailed
from installer.state import load_state
from installer.target import Requirement, StagedTarget, TargetMismatch
from plumbing.errors import ConfigFormatError, ExitCode, ToolError, UsageError, VerificationError
from plumbing.fsutil import rooted
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import (
    CONTAINERD_CONFIG,
    DEB_SEED,
    TOOLKIT,
    build_target,
    dpkg_versions,
    rpm_query,
    seed_containerd_node,
    seed_dpkg_root,
    seed_rpm_root,
    tree_digest,
    write_signed_bundle,
)


class Services:
    def __init__(self, healthy: bool = True) -> None:
        self.healthy = healthy
        self.calls: List[Tuple[str, str]] = []

    def restart(self, unit: str) -> None:
        self.calls.append(("restart", unit))

    def is_active(self, unit: str) -> bool:
        self.calls.append(("is-active", unit))
        return self.healthy

    def is_stopped(self, unit: str) -> bool:
        return False


@pytest.fixture(scope="session")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, StagedTarget]:
    out = tmp_path_factory.mktemp("stand-in-packages")
    return {
        "deb-1.17.8": build_target(out / "deb-1.17.8", "deb", "1.17.8-1", "amd64"),
        "deb-1.17.7": build_target(out / "deb-1.17.7", "deb", "1.17.7-1", "amd64"),
        "deb-arm64": build_target(out / "deb-arm64", "deb", "1.17.8-1", "arm64"),
        "rpm-1.17.8": build_target(out / "rpm-1.17.8", "rpm", "1.17.8-1", "x86_64"),
    }


@pytest.fixture()
def deb_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    seed_containerd_node(root)
    return root


def _setup(
    tmp_path: Path, *target_list: StagedTarget, tamper: bool = False, key: Optional[TestKey] = None
) -> Tuple[Path, Path, NodeEnv, Services]:
    """A real signed bundle of ``target_list``, the operator key file, and a real env with a recording service manager."""
    signer = key or _KEYS["operator"]
    bundles = tmp_path / "bundles"
    bundle = write_signed_bundle(
        bundles / f"bundle-{len(list(bundles.glob('*.tar'))) if bundles.exists() else 0}.tar",
        target_list,
        signer.home,
        signer.fingerprint,
        tamper=tamper,
    )
    services = Services()
    return bundle, _KEYS["operator"].public, NodeEnv(services=services), services


_KEYS: Dict[str, TestKey] = {}


@pytest.fixture(autouse=True)
def _keys(request: pytest.FixtureRequest) -> None:
    _KEYS["operator"] = request.getfixturevalue("test_key")
    _KEYS["other"] = request.getfixturevalue("other_key")


class TestDpkgRoot:
    def test_install_puts_files_registers_runtime_and_records_state(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, services = _setup(tmp_path, targets["deb-1.17.8"], targets["rpm-1.17.8"])
        result = install(bundle, key, InstallOptions(root=deb_root, hold=True), env)
        assert result.outcome == "installed"
        assert dpkg_versions(deb_root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
        ctk = deb_root / "usr/bin/nvidia-ctk"
        assert subprocess.run([str(ctk)], capture_output=True, text=True).stdout.startswith(
            "nvidia-ctk version 1.17.8"
        )
        assert ContainerdEngine().report(deb_root, "nvidia")["RUNTIME"] == "nvidia"
        state = load_state(deb_root)
        assert state is not None and state.packages == dict.fromkeys(TOOLKIT, "1.17.8-1")
        assert state.held and "containerd" in state.engines
        # node paths, as the node itself names them: a copy or the booted image finds its own files
        assert "/etc/containerd/config.toml" in {f.path for f in state.files}
        assert all(f.backup is None or rooted(deb_root, f.backup).is_file() for f in state.files)
        selections = subprocess.run(
            ["dpkg", f"--root={deb_root}", "--get-selections", *TOOLKIT], capture_output=True, text=True
        ).stdout
        assert selections.split().count("hold") == 4
        assert services.calls == []  # --root is not /: never restart the host's engines
        assert "skipped: no NVIDIA driver" in result.cdi
        assert not list((deb_root / "var/lib/gpu-airgap").glob("staging-*"))

    def test_install_auto_configures_podman_and_says_what_to_run_for_each_lxc_container(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        for marker in ("usr/bin/podman", "usr/bin/lxc-start"):
            (deb_root / marker).parent.mkdir(parents=True, exist_ok=True)
            (deb_root / marker).write_text("")
        for name in ("web", "gpu1"):
            (deb_root / "var/lib/lxc" / name).mkdir(parents=True)
            (deb_root / "var/lib/lxc" / name / "config").write_text(f"lxc.uts.name = {name}\n")
        bundle, key, env, services = _setup(tmp_path, targets["deb-1.17.8"])
        dry = install(bundle, key, InstallOptions(root=deb_root, dry_run=True), env)
        assert dry.engines["podman"].startswith(
            "would configure: podman containers started with NVIDIA_VISIBLE_DEVICES"
        )
        result = install(bundle, key, InstallOptions(root=deb_root), env)
        hook = deb_root / "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
        assert hook.is_file()  # no driver, so no CDI spec: podman gets the hook
        assert result.engines["podman"].startswith("configured: ")
        assert result.engines["lxc"] == (
            "nothing written: LXC is configured per container; for each that should see the GPUs run: "
            "gpu-airgap configure lxc --container gpu1; gpu-airgap configure lxc --container web"
        )
        state = load_state(deb_root)
        assert state is not None and "podman" in state.engines and "lxc" not in state.engines
        assert services.calls == []
        assert {"podman", "lxc"} <= set(status(deb_root, env)["engines"])
        uninstall(deb_root, env, keep_packages=True)
        assert not hook.exists()

    def test_second_install_is_a_noop_that_says_so(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root), env)
        before = tree_digest(deb_root)
        again = install(bundle, key, InstallOptions(root=deb_root), env)
        assert again.outcome == "up-to-date"
        assert "already installed" in again.messages[0]
        assert tree_digest(deb_root) == before

    @pytest.mark.parametrize("problem", ["tampered", "wrong-key", "other-arch"])
    def test_bad_bundle_changes_nothing_under_the_root(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget], problem: str
    ) -> None:
        target = targets["deb-arm64"] if problem == "other-arch" else targets["deb-1.17.8"]
        signer = _KEYS["other"] if problem == "wrong-key" else None
        bundle, key, env, _ = _setup(tmp_path, target, tamper=problem == "tampered", key=signer)
        before = tree_digest(deb_root)
        expected = {
            "tampered": VerificationError,
            "wrong-key": VerificationError,
            "other-arch": TargetMismatch,
        }[problem]
        with pytest.raises(expected) as info:
            install(bundle, key, InstallOptions(root=deb_root), env)
        if problem == "other-arch":
            assert "deb/arm64" in str(info.value) and "deb/amd64" in str(info.value)
        if problem == "tampered":
            assert "libnvidia-container" in str(info.value)
        if problem == "wrong-key":
            assert "not in the trusted keyring" in str(info.value)
        assert tree_digest(deb_root) == before

    def test_missing_node_requirement_is_named_and_nothing_installed(
        self, tmp_path: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        root = tmp_path / "root"
        seed_dpkg_root(root, libraries={"libc6": "2.36-9", "libcap2": "1:2.66-4"})
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        before = tree_digest(root)
        with pytest.raises(PreflightFailed, match=r"libseccomp2 \(>= 0.0.0~20120605\)"):
            install(bundle, key, InstallOptions(root=root), env)
        assert dpkg_versions(root) == {}
        assert tree_digest(root) == before

    def test_too_old_node_library_is_reported_with_its_constraint(
        self, tmp_path: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        root = tmp_path / "root"
        seed_dpkg_root(root, libraries={"libc6": "2.9-1", "libcap2": "1:2.66-4", "libseccomp2": "2.5.4-1"})
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        with pytest.raises(PreflightFailed, match=r"libc6 \(>= 2.14\)"):
            install(bundle, key, InstallOptions(root=root), env)

    def test_downgrade_refused_without_allow_downgrade(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root), env)
        old_bundle, old_key, old_env, _ = _setup(tmp_path, targets["deb-1.17.7"])
        assert old_bundle != bundle
        with pytest.raises(
            PreflightFailed,
            match=r"nvidia-container-toolkit 1.17.8-1 are newer than the bundle's 1.17.7-1; pass",
        ):
            install(old_bundle, old_key, InstallOptions(root=deb_root), old_env)
        assert dpkg_versions(deb_root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
        install(old_bundle, old_key, InstallOptions(root=deb_root, allow_downgrade=True), old_env)
        assert dpkg_versions(deb_root) == dict.fromkeys(TOOLKIT, "1.17.7-1")

    def test_dry_run_prints_the_plan_and_changes_nothing(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        before = tree_digest(deb_root)
        result = install(bundle, key, InstallOptions(root=deb_root, dry_run=True), env)
        assert result.outcome == "dry-run"
        assert any(m.startswith("would install libnvidia-container1 1.17.8-1") for m in result.messages)
        assert "runtimes.nvidia]" in result.diff
        assert tree_digest(deb_root) == before

    def test_dry_run_diff_enables_cdi_as_the_install_would_when_a_driver_is_present(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        (deb_root / "dev").mkdir()
        (deb_root / "dev/nvidiactl").write_text("stand-in\n")
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        plan = install(bundle, key, InstallOptions(root=deb_root, dry_run=True), env)
        assert plan.cdi == "would generate" and "+  enable_cdi = true" in plan.diff

    def test_the_run_plans_each_engine_once_before_any_package_like_its_dry_run(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        planned: List[Tuple[str, Dict[str, str]]] = []  # (engine, packages installed when it was planned)

        class Counting:
            """The real engine, counting how often a run plans its configuration."""

            def __init__(self, name: str) -> None:
                self.name = name
                self.inner = get_engine(name)

            def plan(self, options: RuntimeOptions) -> ConfigPlan:
                planned.append((self.name, dpkg_versions(deb_root)))
                return self.inner.plan(options)

            def report(self, root: Path, runtime_name: str, config: Optional[str] = None) -> Dict[str, str]:
                return self.inner.report(root, runtime_name, config)

        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        env = dataclasses.replace(env, engine=Counting)
        dry = install(bundle, key, InstallOptions(root=deb_root, dry_run=True), env)
        assert planned == [("containerd", {})]
        done = install(bundle, key, InstallOptions(root=deb_root), env)
        assert planned == [("containerd", {}), ("containerd", {})]  # the run decides once, before any package
        assert dry.changed and done.changed and dry.engines == {"containerd": "would register"}
        assert done.engines == {"containerd": "registered runtime 'nvidia'"}

    def test_an_engine_config_it_cannot_edit_stops_the_install_before_any_package(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        config = deb_root / "etc/containerd/config.toml"
        config.write_text("version = 2\n[plugins\n")  # not TOML
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        with pytest.raises(ConfigFormatError, match=r"config\.toml"):
            install(bundle, key, InstallOptions(root=deb_root), env)
        assert dpkg_versions(deb_root) == {} and load_state(deb_root) is None

    def test_uninstall_restores_config_byte_for_byte_and_removes_packages(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root, hold=True), env)
        result = uninstall(deb_root, env)
        assert (deb_root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
        assert not (deb_root / "etc/containerd/conf.d/99-nvidia.toml").exists()
        assert result.removed == list(reversed(TOOLKIT))
        assert dpkg_versions(deb_root) == {}
        assert not (deb_root / "usr/bin/nvidia-ctk").exists()
        assert load_state(deb_root) is None

    def test_uninstall_on_the_live_system_says_when_an_engine_stays_down(
        self,
        tmp_path: Path,
        deb_root: Path,
        targets: Dict[str, StagedTarget],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        import installer.manage as manage_mod

        bundle, key, env, services = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root), env)
        services.healthy = False
        monkeypatch.setattr(manage_mod, "is_live_root", lambda root: True)  # restart as on a real node
        result = uninstall(deb_root, env)
        assert ("restart", "containerd") in services.calls
        assert result.failed_engines == ["containerd"]
        assert (
            deb_root / "etc/containerd/config.toml"
        ).read_bytes() == CONTAINERD_CONFIG  # restored all the same
        assert "did not come back" in str(manage_mod.EngineNotRunning(result.failed_engines))

    def test_hold_asked_on_a_later_run_is_set_recorded_and_then_up_to_date(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root), env)
        held = install(bundle, key, InstallOptions(root=deb_root, hold=True), env)
        assert (
            held.changed and held.outcome == "installed" and any(m.startswith("held ") for m in held.messages)
        )
        state = load_state(deb_root)
        assert state is not None and state.held
        assert not install(bundle, key, InstallOptions(root=deb_root, hold=True, dry_run=True), env).changed
        assert install(bundle, key, InstallOptions(root=deb_root, hold=True), env).outcome == "up-to-date"

    def test_engines_left_unrestarted_stay_pending_until_restart_restarts_them(
        self,
        tmp_path: Path,
        deb_root: Path,
        targets: Dict[str, StagedTarget],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # What an Ansible handler or a pod relies on: a restart that never ran is not forgotten.
        import installer.install as install_mod
        import installer.manage as manage_mod

        monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)  # engines as on a real node
        monkeypatch.setattr(manage_mod, "is_live_root", lambda root: True)
        bundle, key, env, services = _setup(tmp_path, targets["deb-1.17.8"])
        first = install(bundle, key, InstallOptions(root=deb_root, no_restart=True), env)
        assert first.restart_pending == ["containerd"] and services.calls == []
        again = install(bundle, key, InstallOptions(root=deb_root, no_restart=True), env)
        assert again.outcome == "up-to-date" and again.restart_pending == ["containerd"]
        assert status(deb_root, env)["restart_pending"] == ["containerd"]

        done = manage_mod.restart_pending(deb_root, env)
        assert done.changed and ("restart", "containerd") in services.calls and not done.failed_engines
        state = load_state(deb_root)
        assert state is not None and state.restart_pending == [] and state.engines == ["containerd"]
        assert manage_mod.restart_pending(deb_root, env).outcome == "nothing to restart"

    def test_a_pending_engine_that_stays_down_gets_its_config_back(
        self,
        tmp_path: Path,
        deb_root: Path,
        targets: Dict[str, StagedTarget],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        import installer.install as install_mod
        import installer.manage as manage_mod

        monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)
        monkeypatch.setattr(manage_mod, "is_live_root", lambda root: True)
        bundle, key, env, services = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root, no_restart=True), env)
        services.healthy = False
        failed = manage_mod.restart_pending(deb_root, env)
        assert failed.failed_engines == ["containerd"]
        assert (deb_root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
        state = load_state(deb_root)
        assert state is not None and state.restart_pending == [] and "containerd" not in state.engines

    def test_a_later_install_that_may_restart_retries_the_pending_engines(
        self,
        tmp_path: Path,
        deb_root: Path,
        targets: Dict[str, StagedTarget],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        import installer.install as install_mod

        monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)
        bundle, key, env, services = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root, no_restart=True), env)
        retried = install(bundle, key, InstallOptions(root=deb_root), env)
        assert (
            retried.changed and retried.restart_pending == [] and ("restart", "containerd") in services.calls
        )
        state = load_state(deb_root)
        assert state is not None and state.restart_pending == []

    def test_restart_of_a_named_engine_after_configure_puts_its_config_back_when_it_stays_down(
        self, deb_root: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # The mirror source registers the runtime with `configure containerd` (no install record).
        import installer.install as install_mod
        import installer.manage as manage_mod

        monkeypatch.setattr(install_mod, "is_live_root", lambda root: True)
        monkeypatch.setattr(manage_mod, "is_live_root", lambda root: True)
        assert run_cli("configure", "containerd", "--root", str(deb_root)).exit_code == 0
        assert (deb_root / "etc/containerd/config.toml").read_bytes() != CONTAINERD_CONFIG
        services = Services(healthy=False)
        result = manage_mod.restart_pending(deb_root, NodeEnv(services=services), ["containerd"])
        assert ("restart", "containerd") in services.calls and result.failed_engines == ["containerd"]
        assert (deb_root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
        assert load_state(deb_root) is None
        with pytest.raises(UsageError, match="the engines are containerd, docker, crio"):
            manage_mod.restart_pending(deb_root, NodeEnv(services=services), ["podman"])

    def test_restart_refuses_another_root(self, deb_root: Path) -> None:
        result = run_cli("restart", "--root", str(deb_root))
        assert (
            result.exit_code == ExitCode.USAGE
            and "engines are restarted only on the running system" in result.stderr
        )

    def test_status_reports_packages_engines_and_drift(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        install(bundle, key, InstallOptions(root=deb_root), env)
        report = status(deb_root, env)
        assert report["problems"] == []
        assert report["packages"] == dict.fromkeys(TOOLKIT, "1.17.8-1")
        assert report["engines"]["containerd"]["RUNTIME"] == "nvidia"
        json.dumps(report)
        (deb_root / "etc/containerd/config.toml").write_bytes(b"version = 2\n# edited by hand\n")
        drift = status(deb_root, env)["problems"]
        assert any("config.toml was edited after gpu-airgap wrote it" in p for p in drift)

    def test_failed_dpkg_run_is_undone_and_the_state_named(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        # A file that belongs to another package makes dpkg refuse the toolkit part-way.
        (deb_root / "var/lib/dpkg/info/intruder.list").write_text("/usr/bin/nvidia-container-runtime-hook\n")
        with (deb_root / "var/lib/dpkg/status").open("a") as status_file:
            status_file.write(
                "\nPackage: intruder\nStatus: install ok installed\nMaintainer: x <x@example.invalid>\nArchitecture: amd64\nVersion: 1\nDescription: x\n"
            )
        (deb_root / "usr/bin").mkdir(parents=True)
        (deb_root / "usr/bin/nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
        with pytest.raises(
            InstallFailed, match="the node now has libnvidia-container1: not installed"
        ) as info:
            install(bundle, key, InstallOptions(root=deb_root), env)
        assert "removed the newly added" in str(info.value)
        assert dpkg_versions(deb_root) == {}
        assert load_state(deb_root) is None

    def test_old_nvidia_container_runtime_is_removed_first_and_recorded(
        self, tmp_path: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        root = tmp_path / "root"
        seed_dpkg_root(root, libraries={**DEB_SEED, "nvidia-container-runtime": "3.4.0-1"})
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        result = install(bundle, key, InstallOptions(root=root), env)
        assert any(
            m.startswith("removed nvidia-container-runtime 3.4.0-1: nvidia-container-toolkit")
            for m in result.messages
        )
        assert dpkg_versions(root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
        state = load_state(root)
        assert state is not None and state.removed == {"nvidia-container-runtime": "3.4.0-1"}

    def test_breaks_come_from_the_signed_manifest(
        self, tmp_path: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        # nvidia-docker2 is not in the installer's fallback list: only the manifest can say it must go.
        root = tmp_path / "root"
        seed_dpkg_root(root, libraries={**DEB_SEED, "nvidia-docker2": "2.13.0-1"})
        base = targets["deb-1.17.8"]
        rule = Requirement("nvidia-docker2", "<<", "2.14.0")
        packages = tuple(
            dataclasses.replace(p, breaks=(rule,)) if p.name == "nvidia-container-toolkit" else p
            for p in base.packages
        )
        bundle, key, env, _ = _setup(tmp_path, dataclasses.replace(base, packages=packages))
        plan = install(bundle, key, InstallOptions(root=root, dry_run=True), env)
        assert (
            "would remove nvidia-docker2 2.13.0-1: nvidia-container-toolkit 1.17.8-1 breaks nvidia-docker2 (<< 2.14.0)"
            in plan.messages
        )
        install(bundle, key, InstallOptions(root=root), env)
        state = load_state(root)
        assert state is not None and state.removed == {"nvidia-docker2": "2.13.0-1"}

    def test_uninstall_restores_the_previous_default_runtime_byte_for_byte(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        daemon = b'{\n    "default-runtime": "runc",\n    "log-level": "warn"\n}\n'
        (deb_root / "etc/docker").mkdir(parents=True)
        (deb_root / "etc/docker/daemon.json").write_bytes(daemon)
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        result = install(bundle, key, InstallOptions(root=deb_root, set_as_default=True), env)
        assert set(result.engines) == {"containerd", "docker"}
        assert ContainerdEngine().report(deb_root, "nvidia")["DEFAULT"] == "nvidia"
        assert DockerEngine().report(deb_root, "nvidia")["DEFAULT"] == "nvidia"
        state = load_state(deb_root)
        assert state is not None and state.signer == _KEYS["operator"].fingerprint
        assert state.bundle_id == result.bundle_id and len(state.bundle_id) == 64
        recorded = {Path(f.path).name: f for f in state.files}
        assert {"config.toml", "daemon.json"} <= set(recorded)
        backup = recorded["daemon.json"].backup
        assert backup is not None and rooted(deb_root, backup).read_bytes() == daemon
        uninstall(deb_root, env)
        assert (deb_root / "etc/docker/daemon.json").read_bytes() == daemon
        assert (deb_root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
        assert ContainerdEngine().report(deb_root, "nvidia")["DEFAULT"] == "runc"
        assert DockerEngine().report(deb_root, "nvidia")["DEFAULT"] == "runc"

    def test_cdi_spec_is_written_with_a_driver_recorded_and_removed_by_uninstall(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        for stand_in in ("proc/driver/nvidia/version", "dev/nvidiactl", "dev/nvidia0"):
            (deb_root / stand_in).parent.mkdir(parents=True, exist_ok=True)
            (deb_root / stand_in).write_text("stand-in\n")
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        result = install(bundle, key, InstallOptions(root=deb_root), env)
        spec = deb_root / "etc/cdi/nvidia.yaml"
        assert result.cdi.startswith("written to /etc/cdi/nvidia.yaml") and spec.is_file()
        assert b"/dev/nvidia0" in spec.read_bytes()
        state = load_state(deb_root)
        assert (
            state is not None
            and "cdi" in state.engines
            and "/etc/cdi/nvidia.yaml" in {f.path for f in state.files}
        )
        assert ContainerdEngine().report(deb_root, "nvidia")["CDI"] == "true"
        uninstall(deb_root, env)
        assert not spec.exists()

    def test_cdi_off_skips_the_spec_even_with_a_driver(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        (deb_root / "dev").mkdir()
        (deb_root / "dev/nvidiactl").write_text("stand-in\n")
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        result = install(bundle, key, InstallOptions(root=deb_root, cdi="off"), env)
        assert result.cdi == "skipped: disabled with --cdi off"
        assert not (deb_root / "etc/cdi").exists()

    def test_cdi_on_without_a_driver_is_a_preflight_problem_and_changes_nothing(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        before = tree_digest(deb_root)
        with pytest.raises(PreflightFailed, match="--cdi on needs an NVIDIA driver"):
            install(bundle, key, InstallOptions(root=deb_root, cdi="on"), env)
        assert tree_digest(deb_root) == before

    def test_damaged_state_file_is_refused_before_anything_is_installed(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        (deb_root / "var/lib/gpu-airgap").mkdir(parents=True)
        (deb_root / "var/lib/gpu-airgap/state.json").write_text("{not json")
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
        before = tree_digest(deb_root)
        with pytest.raises(ToolError, match="is not a gpu-airgap state record"):
            install(bundle, key, InstallOptions(root=deb_root), env)
        assert tree_digest(deb_root) == before and dpkg_versions(deb_root) == {}

    def test_install_accepts_the_first_part_of_a_split_bundle(
        self, tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        signer = _KEYS["operator"]
        first = write_signed_bundle(
            tmp_path / "split" / "bundle.tar",
            [targets["deb-1.17.8"]],
            signer.home,
            signer.fingerprint,
            split=1 << 20,
        )
        assert first.name == "bundle.tar.part001" and len(list(first.parent.glob("bundle.tar.part*"))) >= 2
        result = install(first, signer.public, InstallOptions(root=deb_root), NodeEnv(services=Services()))
        assert result.outcome == "installed" and dpkg_versions(deb_root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
        second = first.with_name("bundle.tar.part002")
        second.write_bytes(second.read_bytes()[:-1] + bytes([second.read_bytes()[-1] ^ 0xFF]))
        with pytest.raises(VerificationError, match="part002"):
            install(
                first,
                signer.public,
                InstallOptions(root=deb_root, dry_run=True),
                NodeEnv(services=Services()),
            )


class TestRpmRoot:
    def test_install_into_rpm_root_and_uninstall(
        self, tmp_path: Path, targets: Dict[str, StagedTarget]
    ) -> None:
        root = tmp_path / "root"
        seed_rpm_root(root, tmp_path)
        (root / "etc/containerd").mkdir(parents=True)
        (root / "etc/containerd/config.toml").write_bytes(CONTAINERD_CONFIG)
        bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"], targets["rpm-1.17.8"])
        result = install(bundle, key, InstallOptions(root=root, hold=True), env)
        assert result.target == "rpm/x86_64"
        rpm = rpm_query(root)
        assert subprocess.run([*rpm, *TOOLKIT], capture_output=True, text=True).stdout.split("\n")[:4] == [
            f"{n} 1.17.8-1" for n in TOOLKIT
        ]
        assert (root / "usr/bin/nvidia-ctk").exists()
        assert (
            "nvidia-container-toolkit-0:1.17.8-1.*"
            in (root / "etc/dnf/plugins/versionlock.list").read_text().splitlines()
        )
        assert install(bundle, key, InstallOptions(root=root, hold=True), env).outcome == "up-to-date"
        uninstall(root, env)
        assert subprocess.run([*rpm, "nvidia-container-toolkit"], capture_output=True).returncode != 0
        assert (root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
        assert (root / "etc/dnf/plugins/versionlock.list").read_text().strip() == ""

    def test_missing_rpm_requirement_is_named(self, tmp_path: Path, targets: Dict[str, StagedTarget]) -> None:
        root = tmp_path / "root"
        seed_rpm_root(root, tmp_path, libraries={"glibc": "2.34", "libcap": "2.48"})
        bundle, key, env, _ = _setup(tmp_path, targets["rpm-1.17.8"])
        with pytest.raises(PreflightFailed, match="libseccomp"):
            install(bundle, key, InstallOptions(root=root), env)


def test_install_into_a_root_that_does_not_exist_is_refused_and_creates_nothing(
    tmp_path: Path, targets: Dict[str, StagedTarget]
) -> None:
    bundle, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
    missing = tmp_path / "no-such-root"
    with pytest.raises(UsageError, match="is not a directory"):
        install(bundle, key, InstallOptions(root=missing), env)
    assert not missing.exists()


def test_uninstall_without_a_recorded_install_says_so(tmp_path: Path) -> None:
    seed_dpkg_root(tmp_path)
    with pytest.raises(ToolError, match="nothing to uninstall"):
        uninstall(tmp_path, NodeEnv())


def test_cli_install_status_uninstall_round_trip(
    tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
) -> None:
    bundle, key, _, _ = _setup(tmp_path, targets["deb-1.17.8"])
    result = run_cli("install", str(bundle), "--keyring", str(key), "--root", str(deb_root), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["outcome"] == "installed" and data["packages"]["nvidia-container-toolkit"] == "1.17.8-1"
    assert "verifying bundle-0.tar" in result.stderr
    again = run_cli("install", str(bundle), "--keyring", str(key), "--root", str(deb_root))
    assert again.exit_code == 0 and again.stdout.startswith("up-to-date")
    shown = run_cli("status", "--root", str(deb_root), "--json")
    assert shown.exit_code == 0, shown.stdout
    assert json.loads(shown.stdout)["engines"]["containerd"]["runtime"] == "nvidia"
    removed = run_cli("uninstall", "--root", str(deb_root))
    assert removed.exit_code == 0, removed.stderr
    assert "removed nvidia-container-toolkit" in removed.stdout
    assert (deb_root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG


def test_cli_preflight_failure_is_one_sentence_with_exit_code_7(
    tmp_path: Path, targets: Dict[str, StagedTarget]
) -> None:
    root = tmp_path / "root"
    seed_dpkg_root(root, libraries={})
    bundle, key, _, _ = _setup(tmp_path, targets["deb-1.17.8"])
    result = run_cli("install", str(bundle), "--keyring", str(key), "--root", str(root))
    assert result.exit_code == ExitCode.PREFLIGHT
    assert result.stderr.count("\n") == 2  # the progress line and the one-sentence error
    assert "libc6 (>= 2.14) is not installed" in result.stderr and "libseccomp2" in result.stderr


def test_cli_status_exits_9_on_drift(
    tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
) -> None:
    bundle, key, _, _ = _setup(tmp_path, targets["deb-1.17.8"])
    assert run_cli("install", str(bundle), "--keyring", str(key), "--root", str(deb_root)).exit_code == 0
    subprocess.run(
        ["dpkg", f"--root={deb_root}", "--remove", "nvidia-container-toolkit"],
        check=True,
        capture_output=True,
    )
    shown = run_cli("status", "--root", str(deb_root))
    assert shown.exit_code == ExitCode.PROBLEMS_FOUND
    assert "nvidia-container-toolkit is not installed, the install recorded 1.17.8-1" in shown.stdout


def test_upgrade_over_a_held_install_keeps_the_hold(
    tmp_path: Path, deb_root: Path, targets: Dict[str, StagedTarget]
) -> None:
    old, key, env, _ = _setup(tmp_path, targets["deb-1.17.7"])
    install(old, key, InstallOptions(root=deb_root, hold=True), env)
    new, key, env, _ = _setup(tmp_path, targets["deb-1.17.8"])
    result = install(new, key, InstallOptions(root=deb_root, allow_held=True), env)
    assert result.outcome == "installed"
    assert dpkg_versions(deb_root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    selections = subprocess.run(
        ["dpkg", f"--root={deb_root}", "--get-selections", *TOOLKIT], capture_output=True, text=True
    ).stdout
    assert selections.split().count("hold") == 4
    state = load_state(deb_root)
    assert state is not None and state.previous == dict.fromkeys(
        TOOLKIT
    )  # uninstall still knows the node had none
