"""Issue 18 item 2: nothing from a bundle runs on a node before the node's own tools verified it.

The node command (``installer.nodecheck.node_command``, printed by ``bundle build`` and shown in
README) is run exactly as documented: ``sh -c COMMAND`` in the admin's directory holding the bundle
and ``operator.asc``, with a PATH that holds only the node's own tools (tar, zstd, gpg, gpgv,
sha256sum, sh, and what install.sh and python3 use). Every tampered bundle keeps the original
``manifest.json.asc``; its tampered ``install.sh`` or zipapp writes a marker file when it runs, and
the marker must never appear. A positive control (the same marker bundle, signed by the key the
admin trusts) shows the marker does appear when the code runs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from installer.nodecheck import HEAD, INSTALL_SH, NODE_SUMS, NODE_SUMS_SIGNATURE, NODE_TOOL, node_command
from tests import bundle_tamper as tamper
from tests.cli_runner import install_argv, run_bundle_build, run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import node_tools_dir, seed_containerd_node

README = Path(__file__).resolve().parents[1] / "README.md"
BUNDLE = "nvct-1.17.8.tar.zst"


@pytest.fixture(scope="module")
def node_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PATH directory with only the node's own tools (and the node's python3)."""
    return node_tools_dir(tmp_path_factory.mktemp("node-bin"))


class Node:
    """The admin's working directory on a node: the bundle and the operator key they were given."""

    def __init__(self, tmp_path: Path, node_bin: Path, bundle: Path, key: Path) -> None:
        self.dir = tmp_path / "admin"
        self.dir.mkdir(parents=True)
        (self.dir / BUNDLE).write_bytes(bundle.read_bytes())
        (self.dir / "operator.asc").write_bytes(key.read_bytes())
        self.env = {
            "PATH": str(node_bin),
            "HOME": str(tmp_path / "home"),
            "LANG": "C.UTF-8",
            "GPU_AIRGAP_NODE_CACHE": str(tmp_path / "zipapp-cache"),
        }
        self.marker = tmp_path / "MARKER"
        self.root = tmp_path / "root"
        seed_containerd_node(self.root)

    def run_documented(self, *install_args: str, bundle: str = BUNDLE) -> subprocess.CompletedProcess[str]:
        """The node command, exactly as ``bundle build`` prints it, with install options at the end."""
        command = " ".join([node_command(bundle), *install_args])
        return subprocess.run(
            ["sh", "-c", command],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


@pytest.fixture()
def marker(tmp_path: Path) -> Path:
    return tmp_path / "MARKER"


def _node(tmp_path: Path, node_bin: Path, bundle: Path, key: TestKey) -> Node:
    return Node(tmp_path, node_bin, bundle, key.public)


def _refused_before_anything_ran(node: Node, done: subprocess.CompletedProcess[str], where: str) -> None:
    assert done.returncode != 0, done.stdout + done.stderr
    assert where in done.stdout + done.stderr, done.stdout + done.stderr  # the step that stopped the chain
    assert not node.marker.exists(), "code from the tampered bundle ran"
    assert not (node.root / "var/lib/gpu-airgap").exists()


def test_the_documented_command_refuses_a_tampered_install_sh_before_it_runs(
    deb_bundle: Path, operator_key: TestKey, node_bin: Path, marker: Path, tmp_path: Path
) -> None:
    bad = tamper.repack(deb_bundle, tmp_path / "bad.tar.zst", {INSTALL_SH: tamper.marker_script(marker)})
    node = _node(tmp_path, node_bin, bad, operator_key)
    done = node.run_documented("--root", str(node.root))
    _refused_before_anything_ran(node, done, "install.sh: FAILED")  # sha256sum -c stopped the chain


def test_the_documented_command_refuses_a_tampered_node_tool_and_so_does_install_sh_run_directly(
    deb_bundle: Path, operator_key: TestKey, node_bin: Path, marker: Path, tmp_path: Path
) -> None:
    bad = tamper.repack(deb_bundle, tmp_path / "bad.tar.zst", {NODE_TOOL: tamper.marker_zipapp(marker)})
    node = _node(tmp_path, node_bin, bad, operator_key)
    _refused_before_anything_ran(node, node.run_documented("--root", str(node.root)), f"{NODE_TOOL}: FAILED")
    # An admin who skips the check and runs the (genuine) install.sh: it checks the tool itself first.
    subprocess.run(["tar", "--occurrence", "-xf", BUNDLE, *HEAD], cwd=node.dir, check=True)
    direct = subprocess.run(
        ["sh", "install.sh", BUNDLE, "--keyring", "operator.asc", "--root", str(node.root)],
        cwd=node.dir,
        env=node.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert direct.returncode == 3, direct.stderr
    assert "does not match the signed NODE-SHA256SUMS" in direct.stderr and not marker.exists()


def test_a_bundle_resigned_by_another_key_runs_only_for_an_admin_who_trusts_that_key(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, node_bin: Path, marker: Path, tmp_path: Path
) -> None:
    # The attacker lists their install.sh in NODE-SHA256SUMS and signs it with their own key.
    replace = tamper.resigned_node_check(deb_bundle, other_key, {INSTALL_SH: tamper.marker_script(marker)})
    bad = tamper.repack(deb_bundle, tmp_path / "bad.tar.zst", replace)
    node = _node(tmp_path / "a", node_bin, bad, operator_key)
    node.marker = marker
    _refused_before_anything_ran(node, node.run_documented(), "gpgv: Can't check signature")
    # Control: an admin given the attacker's key runs it (so the marker would show a run).
    fooled = _node(tmp_path / "b", node_bin, bad, other_key)
    done = fooled.run_documented()
    assert done.returncode == 0 and marker.read_text().startswith("install.sh from a tampered bundle ran"), (
        done.stderr
    )


def test_a_missing_signature_stops_the_command_at_tar(
    deb_bundle: Path, operator_key: TestKey, node_bin: Path, marker: Path, tmp_path: Path
) -> None:
    replace = tamper.resigned_node_check(deb_bundle, operator_key, {INSTALL_SH: tamper.marker_script(marker)})
    bad = tamper.repack(deb_bundle, tmp_path / "bad.tar.zst", replace, drop=[NODE_SUMS_SIGNATURE])
    node = _node(tmp_path, node_bin, bad, operator_key)
    _refused_before_anything_ran(node, node.run_documented(), f"{NODE_SUMS_SIGNATURE}: Not found in archive")


def test_a_signed_message_by_the_operator_key_is_not_taken_for_the_detached_signature(
    deb_bundle: Path, operator_key: TestKey, node_bin: Path, marker: Path, tmp_path: Path
) -> None:
    # The bundle's own InRelease is a message the operator key signed; gpgv must not accept it as
    # NODE-SHA256SUMS.asc over a list the attacker wrote.
    inrelease = dict((i.name, d) for i, d in tamper.members(deb_bundle))["targets/deb-amd64/InRelease"]
    replace = tamper.resigned_node_check(deb_bundle, operator_key, {INSTALL_SH: tamper.marker_script(marker)})
    bad = tamper.repack(deb_bundle, tmp_path / "bad.tar.zst", {**replace, NODE_SUMS_SIGNATURE: inrelease})
    node = _node(tmp_path, node_bin, bad, operator_key)
    _refused_before_anything_ran(node, node.run_documented(), "not a detached signature")


def test_a_wrong_key_stops_the_command_before_install_sh(
    deb_bundle: Path, other_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    node = _node(tmp_path, node_bin, deb_bundle, other_key)
    done = node.run_documented("--root", str(node.root))
    assert done.returncode != 0 and "gpgv: Can't check signature" in done.stderr, done.stderr
    assert "install.sh:" not in done.stderr and not (node.root / "var/lib/gpu-airgap").exists()


def test_install_sh_run_without_the_checked_files_next_to_it_refuses(
    deb_bundle: Path, operator_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    node = _node(tmp_path, node_bin, deb_bundle, operator_key)
    subprocess.run(
        ["tar", "-xf", BUNDLE, INSTALL_SH, NODE_TOOL], cwd=node.dir, check=True
    )  # the old README steps
    done = subprocess.run(
        ["sh", "install.sh", BUNDLE, "--keyring", "operator.asc"],
        cwd=node.dir,
        env=node.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        done.returncode == 3
        and "NODE-SHA256SUMS and its signature are not next to this script" in done.stderr
    )


@pytest.mark.slow
def test_the_documented_command_works_on_the_first_part_of_a_split_bundle(
    deb_mirror: Path, operator_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    split = "nvct-1.17.8.tar"  # uncompressed, so it makes several 1M parts; a .tar.zst name would contradict --compression none
    out = tmp_path / "built" / split
    out.parent.mkdir()
    built = run_bundle_build(
        deb_mirror, operator_key, out, "--compression", "none", "--split", "1M", "--json"
    )
    assert built.exit_code == 0, built.stderr
    result = json.loads(built.stdout)
    assert result["node_command"] == node_command(f"{split}.part001")
    node = Node(tmp_path, node_bin, out.parent / f"{split}.part001", operator_key.public)
    for part in out.parent.iterdir():
        (node.dir / part.name).write_bytes(part.read_bytes())
    node.env["PATH"] += ":/usr/bin:/bin"  # the installer's dry run reads the node (dpkg-query)
    done = node.run_documented(
        "--root", str(node.root), "--runtime", "containerd", "--dry-run", bundle=f"{split}.part001"
    )
    assert done.returncode == 0, done.stderr
    assert "dry run: nothing was changed" in done.stdout


def test_bundle_build_prints_the_node_command_and_readme_shows_the_same(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    out = tmp_path / BUNDLE
    built = run_bundle_build(deb_mirror, operator_key, out)
    assert built.exit_code == 0, built.stderr
    assert f"  {node_command(BUNDLE)}\n" in built.stdout
    readme = " ".join(README.read_text().replace("\\\n", " ").split())
    assert node_command(BUNDLE) in readme
    # the node check is first after the manifest, so a node reads only the start of the bundle
    names = [info.name for info, _ in tamper.members(out)]
    assert names[2:6] == list(HEAD)


def _manifest_files(bundle: Path) -> Dict[str, str]:
    inspected = json.loads(run_cli("bundle", "inspect", str(bundle), "--json").stdout)
    return {f["path"]: f["role"] for f in inspected["files"]}


def test_the_signed_manifest_lists_the_node_check_and_verify_checks_it(
    deb_bundle: Path, operator_key: TestKey
) -> None:
    files = _manifest_files(deb_bundle)
    assert (files[NODE_SUMS], files[NODE_SUMS_SIGNATURE]) == ("node-checksums", "node-checksums-signature")
    done = run_cli("bundle", "verify", str(deb_bundle), "--keyring", str(operator_key.public), "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["node_check"] is True, done.stdout


def test_verify_fails_a_bundle_whose_node_check_disagrees_with_its_signed_manifest(
    deb_bundle: Path, operator_key: TestKey, other_key: TestKey, tmp_path: Path
) -> None:
    # Both signed by the operator: a build whose list names another install.sh, and one whose list
    # carries a signature by another key. The one-liner would refuse either; so must verify.
    other_install = tamper.resigned_node_check(deb_bundle, operator_key, {INSTALL_SH: b"#!/bin/sh\n"})
    listed = {name: other_install[name] for name in (NODE_SUMS, NODE_SUMS_SIGNATURE)}
    wrong_list = tamper.resigned_manifest(deb_bundle, tmp_path / "a.tar.zst", operator_key, listed)
    sums = dict((i.name, d) for i, d in tamper.members(deb_bundle))[NODE_SUMS]
    foreign = tamper.resigned_manifest(
        deb_bundle, tmp_path / "b.tar.zst", operator_key, {NODE_SUMS_SIGNATURE: other_key.sign_detached(sums)}
    )
    for bundle, member, words in (
        (wrong_list, NODE_SUMS, "disagrees with the signed manifest about install.sh"),
        (foreign, NODE_SUMS_SIGNATURE, "does not verify with the operator key"),
    ):
        done = run_cli("bundle", "verify", str(bundle), "--keyring", str(operator_key.public), "--json")
        report = json.loads(done.stdout)
        assert done.exit_code == 3 and report["first_bad_member"] == member, report
        assert words in report["problems"][0]["message"], report


def test_an_older_bundle_without_the_node_check_verifies_with_a_note_and_the_command_refuses_it(
    deb_bundle: Path, operator_key: TestKey, node_bin: Path, tmp_path: Path
) -> None:
    old = tamper.resigned_manifest(
        deb_bundle, tmp_path / "old.tar.zst", operator_key, drop=[NODE_SUMS, NODE_SUMS_SIGNATURE]
    )
    done = run_cli("bundle", "verify", str(old), "--keyring", str(operator_key.public))
    assert done.exit_code == 0, done.stderr
    assert "warning: this bundle has no NODE-SHA256SUMS (an older gpu-airgap built it)" in done.stderr
    as_json = run_cli("bundle", "verify", str(old), "--keyring", str(operator_key.public), "--json")
    assert json.loads(as_json.stdout)["node_check"] is False
    node = _node(tmp_path / "n", node_bin, old, operator_key)
    refused = node.run_documented()
    assert refused.returncode != 0 and f"{NODE_SUMS}: Not found in archive" in refused.stderr
    # The node tool itself still installs it, and says what the admin should know.
    root = tmp_path / "root"
    seed_containerd_node(root)
    dry = run_cli(
        *install_argv(old, operator_key, root),
        "--runtime",
        "containerd",
        "--dry-run",
    )
    assert dry.exit_code == 0, dry.stderr
    assert "this bundle has no NODE-SHA256SUMS" in dry.stdout


def test_a_split_too_small_for_the_node_check_is_refused_and_writes_nothing(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    from mirror.bundle.build import build_bundle
    from plumbing.errors import UsageError
    from tests.test_bundle import padded_wheels

    wheels = padded_wheels(3 << 20)  # a node tool of over 3 MiB
    out = tmp_path / "out" / BUNDLE
    out.parent.mkdir()
    with pytest.raises(
        UsageError, match=r"too small: the first part must hold NODE-SHA256SUMS.*use --split 5M or more"
    ):
        build_bundle(
            deb_mirror,
            version="1.17.8",
            channel=None,
            targets=[("deb", "amd64")],
            sign_key=operator_key.fingerprint,
            gnupghome=operator_key.home,
            output=out,
            split=1 << 20,
            node_wheels=wheels,
        )
    assert os.listdir(out.parent) == []
