"""A held node is not changed unless the admin says so, as apt and dnf do (issue 25 item 2).

Real dpkg and rpm databases under scratch roots: the hold is dpkg's selection state (``dpkg
--set-selections``, what ``apt-mark hold`` writes) and dnf's versionlock list on rpm nodes.
``--allow-held`` changes held packages and keeps them held at the new version; ``--unhold``
releases the hold.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from installer.install import install
from installer.plan import InstallOptions
from installer.preflight import PreflightFailed
from installer.state import load_state
from installer.target import StagedTarget
from mirror.fleet.cli import pod_script
from plumbing.errors import ExitCode
from tests.cli_runner import command_at, run_cli
from tests.node_fixtures import (
    TOOLKIT,
    build_target,
    dpkg_versions,
    rpm_query,
    seed_containerd_node,
    seed_rpm_root,
)
from tests.test_node_install import _keys, _setup  # noqa: F401 (the autouse key fixture)


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, StagedTarget]:
    out = tmp_path_factory.mktemp("held-releases")
    return {
        f"{fmt}-{version}": build_target(out / f"{fmt}-{version}", fmt, f"{version}-1", arch)
        for fmt, arch in (("deb", "amd64"), ("rpm", "x86_64"))
        for version in ("1.17.7", "1.17.8")
    }


def dpkg_selections(root: Path) -> List[str]:
    out = subprocess.run(
        ["dpkg", f"--root={root}", "--get-selections", *TOOLKIT], capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[1] for line in out.splitlines()]


def rpm_versions(root: Path) -> List[str]:
    out = subprocess.run([*rpm_query(root), *TOOLKIT], capture_output=True, text=True)
    return out.stdout.splitlines()


def versionlock(root: Path) -> List[str]:
    return (root / "etc/dnf/plugins/versionlock.list").read_text().splitlines()


def test_a_held_dpkg_node_is_not_upgraded_unless_asked_and_stays_held_after(
    tmp_path: Path, releases: Dict[str, StagedTarget]
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    old, key, env, _ = _setup(tmp_path, releases["deb-1.17.7"])
    install(old, key, InstallOptions(root=root, hold=True), env)
    new, key, env, _ = _setup(tmp_path, releases["deb-1.17.8"])

    with pytest.raises(PreflightFailed) as refused:
        install(new, key, InstallOptions(root=root), env)
    assert refused.value.exit_code == ExitCode.PREFLIGHT
    assert "nvidia-container-toolkit 1.17.7-1" in str(refused.value.problems)
    assert "are held at that version; pass --allow-held" in refused.value.problems[0]
    assert dpkg_versions(root) == dict.fromkeys(TOOLKIT, "1.17.7-1")
    assert dpkg_selections(root) == ["hold"] * 4

    upgraded = install(new, key, InstallOptions(root=root, allow_held=True), env)
    assert dpkg_versions(root) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    assert dpkg_selections(root) == ["hold"] * 4
    assert f"kept the hold on {', '.join(TOOLKIT)} at this release" in upgraded.messages
    state = load_state(root)
    assert state is not None and state.held

    released = install(new, key, InstallOptions(root=root, unhold=True), env)
    assert released.outcome == "installed" and "released the hold on" in " ".join(released.messages)
    assert dpkg_selections(root) == ["install"] * 4
    state = load_state(root)
    assert state is not None and not state.held


def test_a_hold_set_with_apt_mark_outside_gpu_airgap_stops_the_upgrade_too(
    tmp_path: Path, releases: Dict[str, StagedTarget]
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    old, key, env, _ = _setup(tmp_path, releases["deb-1.17.7"])
    install(old, key, InstallOptions(root=root), env)
    subprocess.run(
        ["dpkg", f"--root={root}", "--set-selections"],
        input=b"nvidia-container-toolkit hold\n",
        check=True,
    )
    new, key, env, _ = _setup(tmp_path, releases["deb-1.17.8"])
    with pytest.raises(PreflightFailed, match="--allow-held") as refused:
        install(new, key, InstallOptions(root=root, dry_run=True), env)
    assert refused.value.problems[0].startswith("nvidia-container-toolkit 1.17.7-1 is held")
    install(new, key, InstallOptions(root=root, allow_held=True), env)
    # what the admin held stays held, the rest stays as it was
    assert dpkg_selections(root) == ["install", "install", "install", "hold"]


def test_a_held_rpm_node_is_not_upgraded_unless_asked_and_its_versionlock_follows(
    tmp_path: Path, releases: Dict[str, StagedTarget]
) -> None:
    root = tmp_path / "root"
    seed_rpm_root(root, tmp_path)
    old, key, env, _ = _setup(tmp_path, releases["rpm-1.17.7"])
    install(old, key, InstallOptions(root=root, hold=True), env)
    assert "nvidia-container-toolkit-0:1.17.7-1.*" in versionlock(root)
    new, key, env, _ = _setup(tmp_path, releases["rpm-1.17.8"])

    with pytest.raises(PreflightFailed, match="pass --allow-held"):
        install(new, key, InstallOptions(root=root), env)
    assert rpm_versions(root) == [f"{n} 1.17.7-1" for n in TOOLKIT]

    install(new, key, InstallOptions(root=root, allow_held=True), env)
    assert rpm_versions(root) == [f"{n} 1.17.8-1" for n in TOOLKIT]
    assert sorted(versionlock(root)) == sorted(f"{n}-0:1.17.8-1.*" for n in TOOLKIT)

    dry = install(new, key, InstallOptions(root=root, unhold=True, dry_run=True), env)
    assert dry.changed and "would release the hold on libnvidia-container1" in " ".join(dry.messages)
    install(new, key, InstallOptions(root=root, unhold=True), env)
    assert versionlock(root) == []


def test_cli_refuses_hold_with_unhold_and_names_the_flags_of_a_held_refusal(
    tmp_path: Path, releases: Dict[str, StagedTarget]
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    old, key, _, _ = _setup(tmp_path, releases["deb-1.17.7"])
    assert run_cli("install", str(old), "--keyring", str(key), "--root", str(root), "--hold").exit_code == 0
    both = run_cli("install", str(old), "--keyring", str(key), "--root", str(root), "--hold", "--unhold")
    assert both.exit_code == ExitCode.USAGE and "--hold and --unhold contradict" in both.stderr
    new, key, _, _ = _setup(tmp_path, releases["deb-1.17.8"])
    refused = run_cli("install", str(new), "--keyring", str(key), "--root", str(root))
    assert refused.exit_code == ExitCode.PREFLIGHT
    assert "--allow-held" in refused.stderr + refused.stdout and "--unhold" in refused.stderr + refused.stdout


def test_a_fleet_rollout_with_hold_moves_held_nodes_on_with_options_install_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "k8s_node.py"
    script.write_text(pod_script())
    spec = importlib.util.spec_from_file_location("k8s_node_hold", script)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    for name, value in {"GPU_AIRGAP_KEYRING": "/key.asc", "GPU_AIRGAP_HOLD": "true"}.items():
        monkeypatch.setenv(name, value)
    argv = program.install_argv(Path("/tool.pyz"), Path("/bundle"))
    assert "--hold" in argv and "--allow-held" in argv
    options = {name for p in command_at(["install"]).params for name in getattr(p, "opts", [])}
    assert {a for a in argv if a.startswith("--")} <= options
