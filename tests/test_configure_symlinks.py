"""Symlinked configs: followed inside the root as the node would, written at the link's target, restored exactly.

An absolute link target is a node path (so under ``--root`` it is mapped under the root, never read
from the host); a link that climbs out of the root is refused with one sentence; the link itself
stays a link through configure, revert, install and uninstall.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Dict

import pytest

from installer.env import NodeEnv
from installer.install import install
from installer.manage import uninstall
from installer.plan import InstallOptions
from installer.target import StagedTarget
from plumbing.errors import ExitCode
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import (
    CONTAINERD_CONFIG,
    build_target,
    seed_containerd_node,
    tree_digest,
    write_signed_bundle,
)

ORIGINAL = b'# the admin\'s own config, kept elsewhere\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc"\n'


def _etc(root: Path) -> Dict[str, str]:
    return {path: digest for path, digest in tree_digest(root).items() if path.startswith("etc")}


def _root_with_linked_config(tmp_path: Path, target: str) -> Path:
    """ROOT/etc/containerd/config.toml is a symlink to ``target``; ROOT/etc/containerd/real/config.toml holds ORIGINAL."""
    root = tmp_path / "root"
    real = root / "etc/containerd/real/config.toml"
    real.parent.mkdir(parents=True)
    real.write_bytes(ORIGINAL)
    (root / "etc/containerd/config.toml").symlink_to(target)
    return root


def test_a_relative_link_is_written_at_its_target_and_revert_restores_it_exactly(tmp_path: Path) -> None:
    root = _root_with_linked_config(tmp_path, "real/config.toml")
    link, real = root / "etc/containerd/config.toml", root / "etc/containerd/real/config.toml"
    before = _etc(root)
    done = run_cli("configure", "containerd", "--root", str(root))
    assert done.exit_code == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == "real/config.toml"
    assert b"runtimes.nvidia" in real.read_bytes() and real.read_bytes().startswith(
        b"# the admin's own config"
    )
    assert f"wrote {real}" in done.stdout
    assert run_cli("configure", "containerd", "--root", str(root)).stdout.startswith("already configured")
    reverted = run_cli("configure", "revert", "--root", str(root))
    assert reverted.exit_code == 0, reverted.stderr
    assert _etc(root) == before  # the link, its target's bytes and mode, nothing else under /etc


def test_an_absolute_link_is_a_node_path_mapped_under_the_root_not_read_from_the_host(tmp_path: Path) -> None:
    node_path = f"/etc/containerd/real-{uuid.uuid4().hex}.toml"
    assert not Path(node_path).exists()  # the host has no such file: only the root's copy can be read
    root = _root_with_linked_config(tmp_path, node_path)
    (root / node_path.lstrip("/")).write_bytes(ORIGINAL)
    link, target = root / "etc/containerd/config.toml", root / node_path.lstrip("/")
    done = run_cli("configure", "containerd", "--root", str(root))
    assert done.exit_code == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == node_path
    assert (
        target.read_bytes().startswith(b"# the admin's own config")
        and b"runtimes.nvidia" in target.read_bytes()
    )
    assert not Path(node_path).exists()
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 0
    assert target.read_bytes() == ORIGINAL and link.is_symlink()


def test_a_link_that_leaves_the_root_is_refused_with_one_sentence_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside.toml"
    outside.write_bytes(ORIGINAL)
    root = _root_with_linked_config(tmp_path, "../../../outside.toml")
    before = tree_digest(tmp_path)
    refused = run_cli("configure", "containerd", "--root", str(root))
    assert refused.exit_code == ExitCode.CONFIG
    link = root / "etc/containerd/config.toml"
    assert refused.stderr.strip() == (
        f"gpu-airgap: error: {link}: is a symbolic link to ../../../outside.toml, which leads outside {root}; refusing to follow it"
    )
    assert tree_digest(tmp_path) == before and outside.read_bytes() == ORIGINAL


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, test_key: TestKey) -> Path:
    out = tmp_path_factory.mktemp("symlink-bundle")
    target: StagedTarget = build_target(out / "pkgs", "deb", "1.17.8-1", "amd64")
    return write_signed_bundle(out / "bundle.tar", [target], test_key.home, test_key.fingerprint)


def test_install_and_uninstall_keep_an_absolute_in_root_link_and_restore_its_target(
    tmp_path: Path, bundle: Path, test_key: TestKey
) -> None:
    root = seed_containerd_node(tmp_path / "root")
    config = root / "etc/containerd/config.toml"
    config.unlink()
    (root / "etc/containerd/node.toml").write_bytes(CONTAINERD_CONFIG)
    config.symlink_to("/etc/containerd/node.toml")
    configs = _etc(root)
    install(bundle, test_key.public, InstallOptions(root=root), NodeEnv())
    assert config.is_symlink() and b"runtimes.nvidia" in (root / "etc/containerd/node.toml").read_bytes()
    uninstall(root, NodeEnv())
    assert _etc(root) == configs


def test_a_drop_in_directory_linked_to_a_node_path_is_read_and_written_inside_the_root(
    tmp_path: Path,
) -> None:
    # conf.d -> /etc/containerd/site.d (absolute, so a node path): the site's drop-in is read from the
    # root's site.d, ours is written there, the import already covers it and the link stays.
    root = tmp_path / "root"
    site = root / "etc/containerd/site.d"
    site.mkdir(parents=True)
    (root / "etc/containerd/conf.d").symlink_to("/etc/containerd/site.d")
    config = root / "etc/containerd/config.toml"
    config.write_text('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    (site / "10-site.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "site/pause:3.9"\n'
    )
    before = _etc(root)
    done = run_cli("configure", "containerd", "--root", str(root))
    assert done.exit_code == 0, done.stderr
    ours = (site / "99-nvidia.toml").read_text()
    assert (
        'sandbox_image = "site/pause:3.9"' in ours and "runtimes.nvidia]" in ours
    )  # the site's CRI table, carried over
    assert config.read_text() == 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    assert (root / "etc/containerd/conf.d").is_symlink()
    assert run_cli("configure", "revert", "--root", str(root)).exit_code == 0
    assert _etc(root) == before
