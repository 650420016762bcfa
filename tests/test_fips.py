"""FIPS nodes: rpms with MD5 file digests are warned about at build time and refused on a FIPS node.

The stand-in rpms are built by the real rpmbuild with NVIDIA's digests (``_binary_filedigest_algorithm``
1, MD5, up to 1.18.0; 8, SHA256, from 1.18.1: :func:`tests.upstream.rpms.file_digest_algo`), synced by
the real ``mirror sync``, built into bundles by ``bundle build`` and installed with the real rpm.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from installer import fips
from installer.target import StagedPackage
from mirror.index.header import read_header
from plumbing.errors import ExitCode
from tests.cli_runner import run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.node_fixtures import TOOLKIT, seed_rpm_root
from tests.upstream import UpstreamServer, UpstreamTree


@pytest.fixture(scope="module")
def rpm_mirror(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """Every stable release, rpm/x86_64 only (1.17.8 and 1.18.0 with MD5 digests, 1.20.1 with SHA256)."""
    dest = tmp_path_factory.mktemp("rpm-mirror")
    synced = run_mirror_sync(
        dest, _upstream_session_server.url, upstream_tree.public_key, "--quiet", version="all", fmt="rpm"
    )
    assert synced.exit_code == 0, synced.stderr
    return dest


def _build(mirror: Path, version: str, key: TestKey, out: Path) -> tuple[Path, dict[str, object], str]:
    bundle = out / f"nvct-{version}.tar"
    built = run_bundle_build(mirror, key, bundle, "--json", version=version, target="rpm/x86_64")
    assert built.exit_code == 0, built.stderr
    return bundle, json.loads(built.stdout), built.stderr


def _manifest_digests(bundle: Path) -> dict[str, str]:
    with tarfile.open(bundle) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        manifest = json.loads(member.read())
    return {p["name"]: p.get("file_digest_algo") for t in manifest["targets"] for p in t["packages"]}


@pytest.fixture(scope="module")
def md5_bundle(rpm_mirror: Path, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(rpm_mirror, "1.17.8", operator_key, tmp_path_factory.mktemp("md5"))[0]


@pytest.fixture(scope="module")
def sha256_bundle(rpm_mirror: Path, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(rpm_mirror, "1.20.1", operator_key, tmp_path_factory.mktemp("sha256"))[0]


def _rpm_q(root: Path) -> str:
    return subprocess.run(
        [
            "rpm",
            "--root",
            str(root),
            "--dbpath",
            "/var/lib/rpm",
            "-qa",
            "--qf",
            "%{NAME} %{VERSION}-%{RELEASE}\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_header_says_md5_before_1_18_1_and_sha256_after(rpm_mirror: Path) -> None:
    found = {
        path.name: read_header(path, "rpm", what=path.name).file_digest_algo
        for path in rpm_mirror.rglob("nvidia-container-toolkit-base-*.rpm")
    }
    assert found["nvidia-container-toolkit-base-1.17.8-1.x86_64.rpm"] == "md5"
    assert found["nvidia-container-toolkit-base-1.20.1-1.x86_64.rpm"] == "sha256"


def test_bundle_build_warns_and_records_when_rpms_would_not_install_on_fips(
    rpm_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    bundle, data, stderr = _build(rpm_mirror, "1.17.8", operator_key, tmp_path)
    assert (
        "rpm/x86_64: the toolkit 1.17.8 rpms carry only md5 file digests; they will not install on FIPS "
        "nodes or with RPM 6 (toolkit 1.18.1 and later carry SHA256 digests)"
    ) in stderr
    assert data["fips_ready"] == {"rpm/x86_64": False}
    assert set(_manifest_digests(bundle).values()) == {"md5"}


def test_bundle_inspect_says_whether_the_rpms_install_on_fips(md5_bundle: Path, sha256_bundle: Path) -> None:
    weak = run_cli("bundle", "inspect", str(md5_bundle))
    assert (
        "  FIPS nodes: no, the rpms carry md5 file digests (toolkit 1.18.1 and later carry SHA256)"
        in weak.stdout.splitlines()
    )
    assert "  FIPS nodes: yes, sha256 file digests" in run_cli("bundle", "inspect", str(sha256_bundle)).stdout


def test_bundle_build_of_a_sha256_release_does_not_warn(
    rpm_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    bundle, data, stderr = _build(rpm_mirror, "1.20.1", operator_key, tmp_path)
    assert "FIPS" not in stderr
    assert data["fips_ready"] == {"rpm/x86_64": True}
    assert set(_manifest_digests(bundle).values()) == {"sha256"}


@pytest.mark.parametrize("how", ["--fips", "fips_enabled"])
def test_fips_node_refuses_an_md5_bundle_before_any_change(
    md5_bundle: Path, operator_key: TestKey, tmp_path: Path, how: str
) -> None:
    root = tmp_path / "root"
    seed_rpm_root(root, tmp_path / "seed")
    flag = ["--fips"] if how == "--fips" else []
    if how == "fips_enabled":  # the kernel's switch, as the node under --root shows it
        (root / "proc/sys/crypto").mkdir(parents=True)
        (root / "proc/sys/crypto/fips_enabled").write_text("1\n")
    before_db, before_files = _rpm_q(root), _tree(root)
    result = run_cli(
        "install", str(md5_bundle), "--keyring", str(operator_key.public), "--root", str(root), *flag
    )
    assert result.exit_code == ExitCode.PREFLIGHT, result.stderr
    assert (
        "this node runs in FIPS mode, where rpm cannot check MD5 or SHA-1 file digests, and the bundle's rpms "
        "carry only those (libnvidia-container1 md5, "
    ) in result.stderr
    assert "build the bundle from toolkit 1.18.1 or later" in result.stderr
    assert _rpm_q(root) == before_db and _tree(root) == before_files


def test_md5_bundle_installs_where_fips_is_off(
    md5_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    seed_rpm_root(root, tmp_path / "seed")
    (root / "proc/sys/crypto").mkdir(parents=True)
    (root / "proc/sys/crypto/fips_enabled").write_text("0\n")
    result = run_cli("install", str(md5_bundle), "--keyring", str(operator_key.public), "--root", str(root))
    assert result.exit_code == 0, result.stderr
    assert "nvidia-container-toolkit 1.17.8-1" in _rpm_q(root)


def test_sha256_bundle_installs_on_a_fips_node(
    sha256_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    seed_rpm_root(root, tmp_path / "seed")
    result = run_cli(
        "install", str(sha256_bundle), "--keyring", str(operator_key.public), "--root", str(root), "--fips"
    )
    assert result.exit_code == 0, result.stderr
    installed = _rpm_q(root)
    assert all(f"{name} 1.20.1-1" in installed for name in TOOLKIT)


def test_a_bundle_that_does_not_record_digests_is_asked_of_the_nodes_rpm(rpm_mirror: Path) -> None:
    """A bundle built before the manifest recorded ``file_digest_algo``: the node's own rpm reads the verified file."""
    md5 = next(rpm_mirror.rglob("libnvidia-container1-1.17.8-1.x86_64.rpm"))
    sha256 = next(rpm_mirror.rglob("libnvidia-container1-1.20.1-1.x86_64.rpm"))
    old = StagedPackage("libnvidia-container1", "1.17.8-1", "x86_64", md5, md5.stat().st_size)
    new = StagedPackage("libnvidia-container1", "1.20.1-1", "x86_64", sha256, sha256.stat().st_size)
    assert fips.rpm_query(md5) == "md5" and fips.rpm_query(sha256) == "sha256"
    problem = fips.fips_problem([old], fips.rpm_query)
    assert problem is not None and "(libnvidia-container1 md5)" in problem
    assert fips.fips_problem([new], fips.rpm_query) is None
