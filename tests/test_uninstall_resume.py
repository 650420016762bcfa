"""An uninstall or revert killed at any point is finished by running it again: exit 0, the node clean.

Uninstall marks the record before its first change, and the journal records each file put back
(atomically, before the next), so a run killed after restoring some configs does not take them
for edits. The kills are real SIGKILLs: after each file write or removal in turn
(:mod:`tests.kill_points`), and from a dpkg wrapper once the packages are removed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from configure.journal import Journal
from installer.env import NodeEnv
from installer.install import install
from installer.plan import InstallOptions
from installer.state import load_state
from installer.target import StagedTarget
from plumbing.errors import ExitCode
from tests.cli_runner import run_cli
from tests.fs_faults import GPU_AIRGAP, dpkg_killing_its_caller
from tests.gpgkeys import TestKey
from tests.node_fixtures import (
    CONTAINERD_CONFIG,
    build_target,
    dpkg_versions,
    seed_containerd_node,
    tree_digest,
    write_signed_bundle,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, test_key: TestKey) -> Path:
    out = tmp_path_factory.mktemp("resume-bundle")
    target: StagedTarget = build_target(out / "pkgs", "deb", "1.17.8-1", "amd64")
    return write_signed_bundle(out / "bundle.tar", [target], test_key.home, test_key.fingerprint)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, bundle: Path, test_key: TestKey) -> Path:
    """A node with the toolkit installed, its containerd config changed and a CDI spec written (copied per run)."""
    root = seed_containerd_node(tmp_path_factory.mktemp("resume") / "node")
    for stand_in in ("proc/driver/nvidia/version", "dev/nvidiactl", "dev/nvidia0"):
        (root / stand_in).parent.mkdir(parents=True, exist_ok=True)
        (root / stand_in).write_text("stand-in\n")
    install(bundle, test_key.public, InstallOptions(root=root, hold=True), NodeEnv())
    assert (root / "etc/cdi/nvidia.yaml").is_file()
    return root


@pytest.fixture(scope="module")
def clean(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """The tree an uninterrupted uninstall leaves: what every finished run must match, byte for byte."""
    root = _copy(installed, tmp_path_factory.mktemp("reference") / "node")
    done = run_cli("uninstall", "--root", str(root))
    assert done.exit_code == 0, done.stderr
    assert (root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
    assert not (root / "etc/cdi").exists() and dpkg_versions(root) == {} and load_state(root) is None
    return _comparable(root)


def _copy(source: Path, target: Path) -> Path:
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    return target


def _comparable(root: Path) -> Dict[str, str]:
    """The tree without dpkg's own bookkeeping of how often it ran (its backups of the status file)."""
    return {
        path: what
        for path, what in tree_digest(root).items()
        if not path.startswith(("var/lib/dpkg/status-old", "var/lib/dpkg/available"))
    }


def _killed_after(changes: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.kill_points", str(changes), *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_uninstall_killed_after_each_change_in_turn_finishes_when_run_again(
    installed: Path, clean: Dict[str, str], tmp_path: Path
) -> None:
    killed_at: List[int] = []
    changes = 0
    while True:
        changes += 1
        assert changes < 40, "the uninstall never ran to its end"
        root = _copy(installed, tmp_path / f"node-{changes}")
        first = _killed_after(changes, "uninstall", "--root", str(root))
        if first.returncode == 0:  # fewer changes than that: every point was tried
            break
        assert first.returncode == -signal.SIGKILL, first.stderr
        killed_at.append(changes)
        if load_state(root) is None:  # killed after its last step, removing the record: nothing is left to do
            assert _comparable(root) == clean
            continue
        again = run_cli("uninstall", "--root", str(root))
        assert again.exit_code == 0, f"killed after change {changes}: {again.stderr}"
        assert "edited" not in again.stderr
        assert _comparable(root) == clean, f"killed after change {changes}"
    # the record, each file put back and its mark, the journal, the record's removal
    assert len(killed_at) == 7, killed_at


def test_status_after_a_killed_uninstall_says_to_run_it_again(installed: Path, tmp_path: Path) -> None:
    root = _copy(installed, tmp_path / "node")
    first = _killed_after(
        3, "uninstall", "--root", str(root)
    )  # the record, then the spec's removal and its mark
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert not (root / "etc/cdi/nvidia.yaml").exists()
    assert b"runtimes.nvidia]" in (root / "etc/containerd/config.toml").read_bytes()
    shown = run_cli("status", "--root", str(root), "--json")
    assert shown.exit_code == ExitCode.PROBLEMS_FOUND
    problems = json.loads(shown.stdout)["problems"]
    assert "an uninstall did not finish; run `gpu-airgap uninstall` again to finish it" in problems
    assert not any("edited" in p for p in problems), problems


def test_an_install_of_the_same_bundle_after_a_killed_uninstall_installs_again_and_clears_the_mark(
    installed: Path, bundle: Path, test_key: TestKey, tmp_path: Path
) -> None:
    root = _copy(installed, tmp_path / "node")
    first = _killed_after(1, "uninstall", "--root", str(root))  # the record is marked, nothing else changed
    assert first.returncode == -signal.SIGKILL, first.stderr
    again = run_cli("install", str(bundle), "--keyring", str(test_key.public), "--root", str(root))
    assert again.exit_code == 0, again.stderr
    assert "already installed" not in again.stdout
    state = load_state(root)
    assert state is not None and not state.uninstalling and state.complete
    assert run_cli("status", "--root", str(root)).exit_code == 0


def test_an_uninstall_killed_once_the_packages_are_removed_finishes_when_run_again(
    installed: Path, clean: Dict[str, str], tmp_path: Path
) -> None:
    root = _copy(installed, tmp_path / "node")
    # dpkg is the real one, wrapped so that it SIGKILLs gpu-airgap the moment the packages are gone
    env = dpkg_killing_its_caller(tmp_path / "bin", "--remove")
    killed = subprocess.run(
        [*GPU_AIRGAP, "uninstall", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert dpkg_versions(root) == {} and load_state(root) is not None
    again = run_cli("uninstall", "--root", str(root))
    assert again.exit_code == 0, again.stderr
    assert _comparable(root) == clean


def test_a_configure_revert_killed_after_each_change_in_turn_finishes_when_run_again(tmp_path: Path) -> None:
    node = seed_containerd_node(tmp_path / "node")
    for stand_in in ("dev/nvidiactl", "dev/nvidia0"):
        (node / stand_in).parent.mkdir(parents=True, exist_ok=True)
        (node / stand_in).write_text("stand-in\n")
    for engine in ("cdi", "containerd", "docker"):
        assert run_cli("configure", engine, "--root", str(node)).exit_code == 0, engine
    reference = _copy(node, tmp_path / "reference")
    assert run_cli("configure", "revert", "--root", str(reference)).exit_code == 0
    clean = tree_digest(reference)
    changes = 0
    while True:
        changes += 1
        assert changes < 40, "the revert never ran to its end"
        root = _copy(node, tmp_path / f"node-{changes}")
        first = _killed_after(changes, "configure", "revert", "--root", str(root))
        if first.returncode == 0:
            break
        assert first.returncode == -signal.SIGKILL, first.stderr
        if Journal(root).entries():  # else killed after its last step, emptying the journal
            again = run_cli("configure", "revert", "--root", str(root))
            assert again.exit_code == 0, f"killed after change {changes}: {again.stderr}"
            assert Journal(root).entries() == []
        assert tree_digest(root) == clean, f"killed after change {changes}"
    # three files, each put back and marked, then the journal emptied
    assert changes == 8


def test_a_file_a_killed_revert_put_back_and_the_admin_edited_since_is_theirs_when_run_again(
    tmp_path: Path,
) -> None:
    node = seed_containerd_node(tmp_path / "node")
    for engine in ("containerd", "docker"):
        assert run_cli("configure", engine, "--root", str(node)).exit_code == 0, engine
    config = node / "etc/containerd/config.toml"
    first = _killed_after(
        2, "configure", "revert", "--root", str(node)
    )  # the config put back and recorded so
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert config.read_bytes() == CONTAINERD_CONFIG
    edit = CONTAINERD_CONFIG + b"# the admin's change after the revert\n"
    config.write_bytes(edit)
    again = run_cli("configure", "revert", "--root", str(node))
    assert again.exit_code == 0, again.stderr
    assert config.read_bytes() == edit and not (node / "etc/docker/daemon.json").exists()


def test_an_uninstall_force_killed_after_keeping_an_edit_keeps_it_once_when_run_again(
    installed: Path, clean: Dict[str, str], tmp_path: Path
) -> None:
    root = _copy(installed, tmp_path / "node")
    config = root / "etc/containerd/config.toml"
    edit = config.read_bytes() + b"# the admin's own change\n"
    config.write_bytes(edit)
    # the record, the spec's removal and its mark, then the edit kept as config.toml.gpu-airgap-old
    first = _killed_after(4, "uninstall", "--root", str(root), "--force")
    assert first.returncode == -signal.SIGKILL, first.stderr
    kept = config.with_name("config.toml.gpu-airgap-old")
    assert kept.read_bytes() == edit and config.read_bytes() == edit
    again = run_cli("uninstall", "--root", str(root), "--force")
    assert again.exit_code == 0, again.stderr
    assert f"kept your edit of {config} as {kept}" in again.stdout
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml", "config.toml.gpu-airgap-old"]
    assert config.read_bytes() == CONTAINERD_CONFIG and kept.read_bytes() == edit
