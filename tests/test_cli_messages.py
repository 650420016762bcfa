"""What commands say, word for word (issue 25 item 10): no contradictions, tense after the fact, one counting rule."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from installer.target import StagedTarget
from tests.cli_runner import CliResult, run_cli
from tests.containerd_helpers import make_root
from tests.gpgkeys import TestKey
from tests.node_fixtures import build_target, seed_containerd_node, write_signed_bundle

PACKAGES = [
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
]


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, StagedTarget]:
    out = tmp_path_factory.mktemp("releases")
    return {v: build_target(out / v, "deb", f"{v}-1", "amd64") for v in ("1.17.7", "1.17.8")}


def _node_and_two_bundles(
    tmp_path: Path, key: TestKey, releases: Dict[str, StagedTarget]
) -> Tuple[Path, Path, Path]:
    """A scratch containerd node and signed bundles of 1.17.7 and 1.17.8."""
    root = tmp_path / "root"
    seed_containerd_node(root)
    old, new = (
        write_signed_bundle(tmp_path / f"{v}.tar", [releases[v]], key.home, key.fingerprint)
        for v in ("1.17.7", "1.17.8")
    )
    return root, old, new


def _install(bundle: Path, key: TestKey, root: Path, *extra: str) -> CliResult:
    return run_cli("install", str(bundle), "--keyring", str(key.public), "--root", str(root), *extra)


def _lines(result: CliResult) -> List[str]:
    return [line.strip() for line in result.stdout.splitlines()]


def test_plain_containerd_is_named_once(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    result = run_cli("configure", "containerd", "--root", str(tmp_path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    said = result.stdout + result.stderr
    assert "the containerd of containerd" not in said
    assert (
        "using containerd (config /etc/containerd/config.toml; found /etc/containerd/config.toml)" in said
    ), said


def test_an_upgrade_is_planned_in_a_dry_run_and_told_in_the_past_after_it(
    tmp_path: Path, test_key: TestKey, releases: Dict[str, StagedTarget]
) -> None:
    root, old, new = _node_and_two_bundles(tmp_path, test_key, releases)
    assert _install(old, test_key, root).exit_code == 0

    planned = _install(new, test_key, root, "--dry-run")
    assert planned.exit_code == 0, planned.stderr
    lines = _lines(planned)
    assert [line for line in lines if line.startswith(("would upgrade", "upgraded"))] == [
        f"would upgrade {name} from 1.17.7-1 to 1.17.8-1" for name in PACKAGES
    ]
    assert lines[-1] == "dry run: nothing was changed" and lines.count("dry run: nothing was changed") == 1
    assert "will be" not in planned.stdout

    done = _install(new, test_key, root)
    assert done.exit_code == 0, done.stderr
    assert [line for line in _lines(done) if line.startswith(("would upgrade", "upgraded"))] == [
        f"upgraded {name} from 1.17.7-1 to 1.17.8-1" for name in PACKAGES
    ]
    assert "will be" not in done.stdout and "dry run" not in done.stdout


def test_status_without_an_install_does_not_claim_no_drift_from_one(tmp_path: Path) -> None:
    seed_containerd_node(tmp_path)
    result = run_cli("status", "--root", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    lines = _lines(result)
    assert lines[1] == "bundle: no install recorded by gpu-airgap"
    assert lines[-1] == "nothing to check for drift: gpu-airgap has recorded no install here"
    assert "no drift from the recorded install" not in result.stdout


def test_uninstall_dry_run_ends_with_the_same_sentence_as_install(
    tmp_path: Path, test_key: TestKey, releases: Dict[str, StagedTarget]
) -> None:
    root = tmp_path / "root"
    seed_containerd_node(root)
    bundle = write_signed_bundle(
        tmp_path / "b.tar", [releases["1.17.8"]], test_key.home, test_key.fingerprint
    )
    assert _install(bundle, test_key, root).exit_code == 0
    result = run_cli("uninstall", "--root", str(root), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert _lines(result)[-1] == "dry run: nothing was changed"


@pytest.mark.slow
def test_build_and_verify_count_members_and_bytes_alike_and_name_targets_as_typed(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    bundle = tmp_path / "b.tar"
    build = ["bundle", "build", "--mirror", str(deb_mirror), "--sign-key", operator_key.fingerprint]
    built = run_cli(
        *build, "--gnupghome", str(operator_key.home), "--output", str(bundle), "--target", "deb/amd64"
    )
    assert built.exit_code == 0, built.stderr
    verified = run_cli("bundle", "verify", str(bundle), "--keyring", str(operator_key.public), "--json")
    assert verified.exit_code == 0, verified.stderr
    report = json.loads(verified.stdout)
    summary = _lines(built)[1]
    assert summary.startswith(
        f"{report['members_checked']} members, {report['bytes_checked']} bytes, toolkit 1.17.8, "
    )
    assert ", targets deb/amd64, " in summary
    with tarfile.open(bundle) as tar:
        assert report["members_checked"] == len(tar.getmembers())


def test_a_downgrade_refusal_says_its_flag_once(
    tmp_path: Path, test_key: TestKey, releases: Dict[str, StagedTarget]
) -> None:
    root, old, new = _node_and_two_bundles(tmp_path, test_key, releases)
    assert _install(new, test_key, root).exit_code == 0
    refused = _install(old, test_key, root)
    assert refused.exit_code == 7
    installed = ", ".join(f"{name} 1.17.8-1" for name in PACKAGES)
    assert refused.stderr.splitlines()[-1] == (
        f"gpu-airgap: error: the node is not ready for this bundle: {installed} are newer than the bundle's "
        "1.17.7-1; pass --allow-downgrade to install them anyway"
    )


def test_an_untrusted_signer_is_named_by_its_full_fingerprint(
    tmp_path: Path, test_key: TestKey, other_key: TestKey, releases: Dict[str, StagedTarget]
) -> None:
    bundle = write_signed_bundle(
        tmp_path / "b.tar", [releases["1.17.8"]], test_key.home, test_key.fingerprint
    )
    result = run_cli("bundle", "verify", str(bundle), "--keyring", str(other_key.public))
    assert result.exit_code == 3
    assert result.stderr == (
        "gpu-airgap: error: bundle b.tar failed verification at manifest.json.asc: manifest.json is signed by "
        f"key {test_key.fingerprint}, which is not in the trusted keyring\n"
    )


def test_inspecting_a_key_says_it_is_a_key_not_a_damaged_archive(test_key: TestKey, tmp_path: Path) -> None:
    binary = test_key.export_binary(tmp_path / "operator.gpg")
    armored = tmp_path / "operator.asc"
    shutil.copy(test_key.public, armored)
    for path, kind in (
        (armored, "an OpenPGP key"),
        (binary, "an OpenPGP key"),
        (test_key.home / "pubring.kbx", "a gpg keybox (pubring.kbx)"),
    ):
        for argv in (
            ["bundle", "inspect", str(path)],
            ["bundle", "verify", str(path), "--keyring", str(armored)],
        ):
            result = run_cli(*argv)
            assert result.exit_code == 2, result.stderr
            assert (
                result.stderr
                == f"gpu-airgap: error: {path} is {kind}, not a bundle; a key goes after --keyring\n"
            )
