"""Reverting is safe to try: check everything, then change anything; keep an admin's edit; say what it would do.

``configure revert`` and ``uninstall`` refuse (exit 9) before touching any file, ``--force`` keeps
the edited bytes as ``FILE.gpu-airgap-old`` and says so, and ``--dry-run`` (also ``--json``) lists
what would be restored, deleted and removed while changing nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

import pytest

from installer.env import NodeEnv
from installer.install import install
from installer.plan import InstallOptions
from installer.target import StagedTarget
from plumbing.errors import ExitCode
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import (
    CONTAINERD_CONFIG,
    TOOLKIT,
    build_target,
    dpkg_versions,
    seed_containerd_node,
    tree_digest,
    write_signed_bundle,
)

EDIT = b"version = 2\n# the admin's own change\n"


def _gpu_root(tmp_path: Path) -> Path:
    root = seed_containerd_node(tmp_path / "root")
    for stand_in in ("dev/nvidiactl", "dev/nvidia0"):
        (root / stand_in).parent.mkdir(parents=True, exist_ok=True)
        (root / stand_in).write_text("stand-in\n")
    return root


def test_a_revert_that_refuses_changes_nothing_not_even_the_cdi_spec(tmp_path: Path) -> None:
    root = _gpu_root(tmp_path)
    assert run_cli("configure", "cdi", "--root", str(root)).exit_code == 0  # journaled first, reverted first
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    (root / "etc/containerd/config.toml").write_bytes(EDIT)
    before = tree_digest(root)
    refused = run_cli("configure", "revert", "--root", str(root))
    assert refused.exit_code == ExitCode.PROBLEMS_FOUND
    assert "config.toml was edited after gpu-airgap wrote it" in refused.stderr
    assert (root / "etc/cdi/nvidia.yaml").is_file()
    assert tree_digest(root) == before


def test_a_revert_of_two_engines_where_one_has_nothing_names_it_and_changes_nothing(tmp_path: Path) -> None:
    root = _gpu_root(tmp_path)
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    before = tree_digest(root)
    refused = run_cli(
        "configure", "revert", "--root", str(root), "--runtime", "containerd", "--runtime", "docker"
    )
    assert refused.exit_code == ExitCode.ERROR
    assert (
        f"nothing to revert: gpu-airgap has not changed any docker configuration under {root}"
        in refused.stderr
    )
    assert tree_digest(root) == before


def test_revert_with_nothing_recorded_does_not_name_an_engine_nobody_asked_about(tmp_path: Path) -> None:
    root = _gpu_root(tmp_path)
    refused = run_cli("configure", "revert", "--root", str(root))
    assert refused.exit_code == ExitCode.ERROR
    assert (
        refused.stderr.strip()
        == f"gpu-airgap: error: nothing to revert: gpu-airgap has not changed any configuration under {root}"
    )


def test_revert_force_keeps_the_admins_edit_as_gpu_airgap_old_and_says_so(tmp_path: Path) -> None:
    root = _gpu_root(tmp_path)
    config = root / "etc/containerd/config.toml"
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    config.write_bytes(EDIT)
    done = run_cli("configure", "revert", "--root", str(root), "--force")
    assert done.exit_code == 0, done.stderr
    kept = config.with_name("config.toml.gpu-airgap-old")
    assert f"kept your edit of {config} as {kept}" in done.stdout
    assert kept.read_bytes() == EDIT and config.read_bytes() == CONTAINERD_CONFIG


def test_revert_dry_run_lists_what_it_would_restore_and_delete_and_changes_nothing(tmp_path: Path) -> None:
    root = _gpu_root(tmp_path)
    assert run_cli("configure", "cdi", "--root", str(root)).exit_code == 0
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    before = tree_digest(root)
    dry = run_cli("configure", "revert", "--root", str(root), "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert f"would restore {root / 'etc/containerd/config.toml'}" in dry.stdout
    assert f"would delete {root / 'etc/cdi/nvidia.yaml'} (gpu-airgap had created it)" in dry.stdout
    assert dry.stdout.rstrip().endswith("dry run: nothing was changed")
    as_json = json.loads(run_cli("configure", "revert", "--root", str(root), "--dry-run", "--json").stdout)
    assert as_json["dry_run"] is True and as_json["deleted"] == [str(root / "etc/cdi/nvidia.yaml")]
    assert as_json["restored"] == [str(root / "etc/containerd/config.toml")] and as_json["engines"] == [
        "cdi",
        "containerd",
    ]
    assert tree_digest(root) == before


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, test_key: TestKey) -> Path:
    out = tmp_path_factory.mktemp("revert-bundle")
    target: StagedTarget = build_target(out / "pkgs", "deb", "1.17.8-1", "amd64")
    return write_signed_bundle(out / "bundle.tar", [target], test_key.home, test_key.fingerprint)


def _installed(tmp_path: Path, bundle: Path, key: TestKey) -> Path:
    root = seed_containerd_node(tmp_path / "root")
    install(bundle, key.public, InstallOptions(root=root), NodeEnv())
    return root


def test_uninstall_force_keeps_the_admins_edit_as_gpu_airgap_old_and_says_so(
    tmp_path: Path, bundle: Path, test_key: TestKey
) -> None:
    root = _installed(tmp_path, bundle, test_key)
    config = root / "etc/containerd/config.toml"
    config.write_bytes(EDIT)
    refused = run_cli("uninstall", "--root", str(root))
    assert refused.exit_code == ExitCode.PROBLEMS_FOUND and config.read_bytes() == EDIT
    done = run_cli("uninstall", "--root", str(root), "--force")
    assert done.exit_code == 0, done.stderr
    kept = config.with_name("config.toml.gpu-airgap-old")
    assert f"kept your edit of {config} as {kept}" in done.stdout
    assert kept.read_bytes() == EDIT and config.read_bytes() == CONTAINERD_CONFIG
    assert dpkg_versions(root) == {}


def test_uninstall_dry_run_lists_what_it_would_restore_and_remove_and_changes_nothing(
    tmp_path: Path, bundle: Path, test_key: TestKey
) -> None:
    root = _installed(tmp_path, bundle, test_key)
    before = tree_digest(root)
    dry = run_cli("uninstall", "--root", str(root), "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert f"would restore {root / 'etc/containerd/config.toml'}" in dry.stdout
    assert (
        "would remove nvidia-container-toolkit" in dry.stdout and "dry run: nothing was changed" in dry.stdout
    )
    data: Dict[str, object] = json.loads(
        run_cli("uninstall", "--root", str(root), "--dry-run", "--json").stdout
    )
    assert data["dry_run"] is True and data["removed"] == list(reversed(TOOLKIT))
    assert data["restored"] == [str(root / "etc/containerd/config.toml")]
    assert tree_digest(root) == before
