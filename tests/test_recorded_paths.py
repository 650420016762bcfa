"""Records name node paths: a copied or moved root uninstalls and reverts its own files, never another's.

An install or configure run under ``--root A`` records ``/etc/containerd/config.toml``, not
``A/etc/containerd/config.toml``, so a copy B of A (the image booted as ``/`` is one) acts on B's
files only, and a moved root is uninstalled without ``--force``. Records of older versions (host
paths) are read by taking off the root they were recorded under. A record naming a path outside
the root is refused (exit 5) with the reason, and nothing changes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest

from installer.env import NodeEnv
from installer.install import install
from installer.plan import InstallOptions
from installer.state import load_state
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

JOURNAL = "var/lib/gpu-airgap/configure/journal.json"
STATE = "var/lib/gpu-airgap/state.json"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, test_key: TestKey) -> Path:
    out = tmp_path_factory.mktemp("paths-bundle")
    target: StagedTarget = build_target(out / "pkgs", "deb", "1.17.8-1", "amd64")
    return write_signed_bundle(out / "bundle.tar", [target], test_key.home, test_key.fingerprint)


def _gpu_node(root: Path) -> Path:
    """A containerd node with a GPU (stand-in device files), so the CDI spec is written too."""
    seed_containerd_node(root)
    for stand_in in ("proc/driver/nvidia/version", "dev/nvidiactl", "dev/nvidia0"):
        (root / stand_in).parent.mkdir(parents=True, exist_ok=True)
        (root / stand_in).write_text("stand-in\n")
    return root


def _installed(root: Path, bundle: Path, key: TestKey) -> Path:
    _gpu_node(root)
    install(bundle, key.public, InstallOptions(root=root), NodeEnv())
    assert b"runtimes.nvidia]" in (root / "etc/containerd/config.toml").read_bytes()
    assert (root / "etc/cdi/nvidia.yaml").is_file()
    return root


def _copy(source: Path, target: Path) -> Path:
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    return target


def _clean(root: Path) -> None:
    """The node as before the install: its own containerd config, no spec, no packages, no record."""
    assert (root / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
    assert not (root / "etc/cdi").exists()
    assert dpkg_versions(root) == {}
    assert load_state(root) is None


def _rewrite(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _as_older_version(root: Path) -> None:
    """Rewrite ``root``'s records as gpu-airgap wrote them before node paths: host paths under ``root``."""
    prefix = str(root)

    def journal(data: Dict[str, Any]) -> None:
        data["schema"] = 1
        for entry in data["entries"]:
            entry.pop("restored")
            entry["path"] = prefix + entry["path"]
            entry["backup"] = entry["backup"] and prefix + entry["backup"]
            entry["created"] = [prefix + d for d in entry["created"]]

    def state(data: Dict[str, Any]) -> None:
        data["schema"] = 1
        data.pop("uninstalling")
        for item in data["files"]:
            item["path"] = prefix + item["path"]
            item["backup"] = item["backup"] and prefix + item["backup"]

    _rewrite(root / JOURNAL, journal)
    if (root / STATE).exists():
        _rewrite(root / STATE, state)


def test_the_records_name_node_paths_not_the_root_they_were_written_under(
    tmp_path: Path, bundle: Path, test_key: TestKey
) -> None:
    root = _installed(tmp_path / "a", bundle, test_key)
    recorded = (root / STATE).read_text() + (root / JOURNAL).read_text()
    assert str(root) not in recorded
    state = load_state(root)
    assert state is not None
    assert {f.path for f in state.files} == {"/etc/containerd/config.toml", "/etc/cdi/nvidia.yaml"}


def test_uninstall_of_a_copy_changes_only_the_copy_and_leaves_it_clean(
    tmp_path: Path, bundle: Path, test_key: TestKey
) -> None:
    # B is A as an image booted from it sees itself: the node tool runs with B as its root.
    a = _installed(tmp_path / "a", bundle, test_key)
    b = _copy(a, tmp_path / "b")
    before = tree_digest(a)
    done = run_cli("uninstall", "--root", str(b))
    assert done.exit_code == 0, done.stderr
    assert tree_digest(a) == before  # every file of A, its packages and records: byte for byte
    _clean(b)
    assert f"restored {b / 'etc/containerd/config.toml'}" in done.stdout


def test_configure_revert_of_a_copy_changes_only_the_copy(tmp_path: Path) -> None:
    a = _gpu_node(tmp_path / "a")
    for engine in ("cdi", "containerd"):
        assert run_cli("configure", engine, "--root", str(a)).exit_code == 0
    assert b"runtimes.nvidia]" in (a / "etc/containerd/config.toml").read_bytes()
    b = _copy(a, tmp_path / "b")
    before = tree_digest(a)
    done = run_cli("configure", "revert", "--root", str(b))
    assert done.exit_code == 0, done.stderr
    assert tree_digest(a) == before
    assert (b / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG
    assert not (b / "etc/cdi").exists()


def test_a_moved_root_uninstalls_without_force(tmp_path: Path, bundle: Path, test_key: TestKey) -> None:
    a = _installed(tmp_path / "a", bundle, test_key)
    c = tmp_path / "c"
    shutil.move(str(a), str(c))
    done = run_cli("uninstall", "--root", str(c))
    assert done.exit_code == 0, done.stderr
    _clean(c)
    assert not a.exists()


def test_records_of_an_older_version_are_read_under_a_copy_without_touching_the_original(
    tmp_path: Path, bundle: Path, test_key: TestKey
) -> None:
    a = _installed(tmp_path / "a", bundle, test_key)
    _as_older_version(a)
    assert str(a / "etc/containerd/config.toml") in (a / STATE).read_text()
    b = _copy(a, tmp_path / "b")
    before = tree_digest(a)
    shown = run_cli("status", "--root", str(b), "--json")
    assert shown.exit_code == 0, shown.stdout  # no drift: B's own files are the recorded ones
    done = run_cli("uninstall", "--root", str(b))
    assert done.exit_code == 0, done.stderr
    assert tree_digest(a) == before
    _clean(b)


def test_an_older_journal_without_backups_in_a_moved_root_is_refused_with_the_reason(tmp_path: Path) -> None:
    # Only new files (no backup tells the root the paths were recorded under): they name the old root.
    a = _gpu_node(tmp_path / "a")
    assert run_cli("configure", "cdi", "--root", str(a)).exit_code == 0
    _as_older_version(a)
    c = tmp_path / "c"
    shutil.move(str(a), str(c))
    before = tree_digest(c)
    refused = run_cli("configure", "revert", "--root", str(c))
    assert refused.exit_code == ExitCode.CONFIG
    assert (
        f"names '{a}/etc/cdi/nvidia.yaml', which is not under the root it was recorded for ({c})"
        in refused.stderr
    )
    assert tree_digest(c) == before


@pytest.mark.parametrize("recorded", ["../../etc/x", "/etc/../../x", "etc/x", ""])
def test_a_state_record_naming_a_path_outside_the_root_is_refused_and_nothing_changes(
    tmp_path: Path, bundle: Path, test_key: TestKey, recorded: str
) -> None:
    root = _installed(tmp_path / "a", bundle, test_key)

    def craft(data: Dict[str, Any]) -> None:
        data["files"][0]["path"] = recorded

    _rewrite(root / STATE, craft)
    before = tree_digest(tmp_path)
    refused = run_cli("uninstall", "--root", str(root), "--force")
    assert refused.exit_code == ExitCode.CONFIG
    assert f"names {recorded!r}, which would land outside {root}; refusing to act on it" in refused.stderr
    assert tree_digest(tmp_path) == before
    assert dpkg_versions(root) == dict.fromkeys(TOOLKIT, "1.17.8-1")


def test_an_older_state_record_naming_a_file_outside_its_root_is_refused(
    tmp_path: Path, bundle: Path, test_key: TestKey
) -> None:
    root = _installed(tmp_path / "a", bundle, test_key)
    _as_older_version(root)
    outside = tmp_path / "outside.toml"
    outside.write_bytes(b"not the node's\n")

    def craft(data: Dict[str, Any]) -> None:
        data["files"][0]["path"] = str(outside)

    _rewrite(root / STATE, craft)
    before = tree_digest(tmp_path)
    refused = run_cli("uninstall", "--root", str(root), "--force")
    assert refused.exit_code == ExitCode.CONFIG
    assert f"names '{outside}', which is not under the root it was recorded for ({root})" in refused.stderr
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("field", ["path", "backup"])
def test_a_journal_naming_a_path_outside_the_root_is_refused_by_revert(tmp_path: Path, field: str) -> None:
    root = _gpu_node(tmp_path / "root")
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    secret = tmp_path / "secret"
    secret.write_text("the host's own file\n")

    def craft(data: Dict[str, Any]) -> None:
        data["entries"][0][field] = "/../../secret"

    _rewrite(root / JOURNAL, craft)
    before = tree_digest(tmp_path)
    refused = run_cli("configure", "revert", "--root", str(root), "--force")
    assert refused.exit_code == ExitCode.CONFIG
    assert "names '/../../secret', which would land outside" in refused.stderr
    assert tree_digest(tmp_path) == before


def test_a_journal_path_through_a_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = _gpu_node(tmp_path / "root")
    assert run_cli("configure", "containerd", "--root", str(root)).exit_code == 0
    (root / "etc/escape").symlink_to("../..")  # root/etc/escape/.. climbs out of the root

    def craft(data: Dict[str, Any]) -> None:
        data["entries"][0]["path"] = "/etc/escape/secret"

    _rewrite(root / JOURNAL, craft)
    (tmp_path / "secret").write_text("the host's own file\n")
    before = tree_digest(tmp_path)
    refused = run_cli("configure", "revert", "--root", str(root), "--force")
    assert refused.exit_code == ExitCode.CONFIG
    assert "which leads outside" in refused.stderr
    assert tree_digest(tmp_path) == before
