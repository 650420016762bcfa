"""``mirror import-archive``: NVIDIA's release archive enters a mirror only as its signed index lists it.

The archives are built here in NVIDIA's layout (``hack/prepare-artifacts.sh`` of
NVIDIA/nvidia-container-toolkit: ``tar -czvf`` of ``release-v<version>-<channel>/packages/<distro>/<arch>/*``
files, no directory entries) from the loopback upstream's own packages.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from mirror.disk.store import MirrorState
from tests.cli_runner import CliResult, run_bundle_build, run_cli
from tests.gpgkeys import TestKey
from tests.node_fixtures import build_target, dpkg_versions, seed_containerd_node
from tests.upstream import UpstreamTree

VERSION = "1.18.0"  # the tree's stable release the deb_mirror (synced at 1.17.8) does not hold


def _archive(
    out: Path, files: list[Path], *, version: str = VERSION, fmt: str = "deb", arch: str = "amd64"
) -> Path:
    """NVIDIA's release archive of ``files``, named and laid out as its release scripts make it."""
    distro = "ubuntu18.04" if fmt == "deb" else "centos7"
    path = out / f"nvidia-container-toolkit_{version}_{fmt}_{arch}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for file in files:
            tar.add(file, arcname=f"release-v{version}-stable/packages/{distro}/{arch}/{file.name}")
    return path


def _release_debs(tree: UpstreamTree, version: str = VERSION) -> list[Path]:
    return sorted(tree.deb_repo("stable", "amd64").glob(f"*_{version}-1_amd64.deb"))


def _build(mirror: Path, target: str, key: TestKey, bundle: Path, *, version: str = VERSION) -> CliResult:
    return run_bundle_build(mirror, key, bundle, version=version, target=target)


@pytest.fixture
def mirror(deb_mirror: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "mirror"
    shutil.copytree(deb_mirror, copy)
    return copy


def test_a_release_archive_the_signed_index_lists_enters_the_mirror_and_builds_a_bundle_that_installs(
    mirror: Path, upstream_tree: UpstreamTree, operator_key: TestKey, tmp_path: Path
) -> None:
    debs = _release_debs(upstream_tree)
    assert (
        len(debs) == 5
    )  # the four and libnvidia-container-dev, as NVIDIA's glob takes every package of the release
    archive = _archive(tmp_path, debs)
    result = run_cli("mirror", "import-archive", str(archive), "--mirror", str(mirror), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ok"] and data["toolkit_version"] == f"{VERSION}-1" and len(data["imported"]) == 5
    repo = MirrorState.load(mirror).repo("stable/deb/amd64")
    assert repo is not None
    assert [r.toolkit_version for r in repo.releases] == ["1.17.8-1", f"{VERSION}-1"]
    for deb in debs:
        assert (mirror / "stable/deb/amd64" / deb.name).read_bytes() == deb.read_bytes()
    assert run_cli("mirror", "verify", "--mirror", str(mirror)).exit_code == 0

    bundle = tmp_path / "b.tar.zst"
    built = _build(mirror, "deb/amd64", operator_key, bundle)
    assert built.exit_code == 0, built.stderr
    root = tmp_path / "root"
    seed_containerd_node(root)
    installed = run_cli("install", str(bundle), "--keyring", str(operator_key.public), "--root", str(root))
    assert installed.exit_code == 0, installed.stderr
    assert dpkg_versions(root)["nvidia-container-toolkit"] == f"{VERSION}-1"


def test_a_package_that_differs_from_its_signed_entry_is_refused_and_the_mirror_is_unchanged(
    mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    debs = _release_debs(upstream_tree)
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    for deb in debs:
        shutil.copy(deb, swapped / deb.name)
    victim = swapped / debs[0].name
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes
    victim.write_bytes(bytes(data))
    before = (mirror / ".gpu-airgap/state.json").read_bytes()
    result = run_cli(
        "mirror",
        "import-archive",
        str(_archive(tmp_path, sorted(swapped.iterdir()))),
        "--mirror",
        str(mirror),
    )
    assert result.exit_code == 3
    assert f"{debs[0].name} does not match its signed checksum" in result.stderr
    assert (mirror / ".gpu-airgap/state.json").read_bytes() == before
    assert not (mirror / "stable/deb/amd64" / debs[0].name).exists()
    assert not any((mirror / ".gpu-airgap/staging").rglob("*.deb"))


def test_a_package_no_held_index_lists_is_refused_as_unverifiable(
    mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    stranger = tmp_path / "nvidia-container-toolkit_1.99.0-1_amd64.deb"
    stranger.write_bytes(_release_debs(upstream_tree)[0].read_bytes())
    result = run_cli("mirror", "import-archive", str(_archive(tmp_path, [stranger])), "--mirror", str(mirror))
    assert result.exit_code == 3
    assert (
        "does not list nvidia-container-toolkit_1.99.0-1_amd64.deb, so the archive cannot be verified"
        in result.stderr
    )


def test_an_archive_for_a_repository_the_mirror_holds_no_index_of_is_refused_as_unverifiable(
    mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    rpms = sorted(upstream_tree.rpm_repo("stable", "x86_64").glob(f"*-{VERSION}-1.x86_64.rpm"))
    archive = _archive(tmp_path, rpms, fmt="rpm", arch="x86_64")
    result = run_cli("mirror", "import-archive", str(archive), "--mirror", str(mirror))
    assert result.exit_code == 3
    assert (
        "the mirror holds no signed index for stable/rpm/x86_64, so its packages cannot be verified"
        in result.stderr
    )


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        ("../escape.deb", "refusing path '../escape.deb'"),
        ("/abs/escape.deb", "refusing path '/abs/escape.deb'"),
        ("link.deb", "a link or special file"),
        ("hardlink.deb", "a link or special file"),
        ("device.deb", "a link or special file"),
    ],
)
def test_a_hostile_archive_is_refused_before_anything_is_written(
    mirror: Path, tmp_path: Path, member: str, reason: str
) -> None:
    archive = tmp_path / f"nvidia-container-toolkit_{VERSION}_deb_amd64.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        kinds = {"link.deb": tarfile.SYMTYPE, "hardlink.deb": tarfile.LNKTYPE, "device.deb": tarfile.CHRTYPE}
        if member in kinds:
            info.type, info.linkname = kinds[member], "/etc/shadow"
            tar.addfile(info)
        else:
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
    before = (mirror / ".gpu-airgap/state.json").read_bytes()
    result = run_cli("mirror", "import-archive", str(archive), "--mirror", str(mirror))
    assert result.exit_code == 3, result.stderr
    assert reason in result.stderr
    assert (mirror / ".gpu-airgap/state.json").read_bytes() == before
    assert not (tmp_path / "escape.deb").exists()


def test_a_file_not_named_like_nvidias_archives_is_a_usage_error(mirror: Path, tmp_path: Path) -> None:
    other = tmp_path / "toolkit.tar.gz"
    other.write_bytes(b"")
    result = run_cli("mirror", "import-archive", str(other), "--mirror", str(mirror))
    assert result.exit_code == 2
    assert "is not named like NVIDIA's release archives" in result.stderr


def test_an_archive_missing_a_package_its_release_needs_is_refused_naming_it(
    mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    only_toolkit = [d for d in _release_debs(upstream_tree) if d.name.startswith("nvidia-container-toolkit_")]
    result = run_cli(
        "mirror", "import-archive", str(_archive(tmp_path, only_toolkit)), "--mirror", str(mirror)
    )
    assert result.exit_code == 6
    assert f"and the mirror lack libnvidia-container1_{VERSION}-1_amd64.deb, " in result.stderr, result.stderr


def test_an_unverifiable_archive_is_taken_with_trust_archive_and_its_provenance_says_so(
    mirror: Path, upstream_tree: UpstreamTree, operator_key: TestKey, tmp_path: Path
) -> None:
    rpms = sorted(upstream_tree.rpm_repo("stable", "x86_64").glob(f"*-{VERSION}-1.x86_64.rpm"))
    archive = _archive(tmp_path, rpms, fmt="rpm", arch="x86_64")
    result = run_cli(
        "mirror", "import-archive", str(archive), "--mirror", str(mirror), "--trust-archive", "--json"
    )
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["vouched"]) == len(rpms)
    repo = MirrorState.load(mirror).repo("stable/rpm/x86_64")
    assert repo is not None and repo.provenance.fingerprint == "operator-vouched"
    assert [r.toolkit_version for r in repo.releases] == [f"{VERSION}-1"]
    index = json.loads((mirror / repo.provenance.signed_files[0].path).read_text())
    assert (
        index["archive"] == archive.name
        and index["archive_sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    )

    status = run_cli("mirror", "status", "--mirror", str(mirror), "--offline")
    assert status.exit_code == 0, status.stderr
    assert f"stable/rpm/x86_64: {VERSION}-1" in status.stdout
    assert f"vouched for by the operator: stable/rpm/x86_64/.vouched/{archive.name}.json" in status.stdout
    assert run_cli("mirror", "verify", "--mirror", str(mirror)).exit_code == 0

    bundle = tmp_path / "b.tar.zst"
    built = _build(mirror, "rpm/x86_64", operator_key, bundle)
    assert built.exit_code == 0, built.stderr
    inspected = run_cli("bundle", "inspect", str(bundle), "--json")
    assert inspected.exit_code == 0, inspected.stderr
    assert "operator-vouched" in inspected.stdout


def test_a_vouched_package_changed_in_the_mirror_is_caught(
    mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    rpms = sorted(upstream_tree.rpm_repo("stable", "x86_64").glob(f"*-{VERSION}-1.x86_64.rpm"))
    archive = _archive(tmp_path, rpms, fmt="rpm", arch="x86_64")
    assert (
        run_cli(
            "mirror", "import-archive", str(archive), "--mirror", str(mirror), "--trust-archive"
        ).exit_code
        == 0
    )
    victim = mirror / "stable/rpm/x86_64" / rpms[0].name
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    verified = run_cli("mirror", "verify", "--mirror", str(mirror))
    assert verified.exit_code == 9
    assert rpms[0].name in verified.stderr + verified.stdout


def test_a_release_no_signed_index_lists_is_vouched_for_beside_the_index_and_installs(
    mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    staged = build_target(tmp_path / "debs", "deb", "1.99.0-1", "amd64")
    archive = _archive(tmp_path, [p.path for p in staged.packages], version="1.99.0")
    refused = run_cli("mirror", "import-archive", str(archive), "--mirror", str(mirror))
    assert (
        refused.exit_code == 3 and "pass --trust-archive to vouch for the archive yourself" in refused.stderr
    )
    taken = run_cli("mirror", "import-archive", str(archive), "--mirror", str(mirror), "--trust-archive")
    assert taken.exit_code == 0, taken.stderr
    assert "4 taken on your word (--trust-archive)" in taken.stdout
    repo = MirrorState.load(mirror).repo("stable/deb/amd64")
    assert repo is not None and repo.provenance.fingerprint != "operator-vouched"  # the signed index stays
    assert [i.fingerprint for i in repo.retained] == ["operator-vouched"]
    assert [r.toolkit_version for r in repo.releases] == ["1.17.8-1", "1.99.0-1"]
    toolkit = next(
        p for p in repo.packages if p.version == "1.99.0-1" and p.name == "nvidia-container-toolkit"
    )
    assert toolkit.url == (
        "https://github.com/NVIDIA/nvidia-container-toolkit/releases/download/v1.99.0/"
        "nvidia-container-toolkit_1.99.0_deb_amd64.tar.gz#nvidia-container-toolkit_1.99.0-1_amd64.deb"
    )

    bundle = tmp_path / "b.tar.zst"
    built = _build(mirror, "deb/amd64", operator_key, bundle, version="1.99.0")
    assert built.exit_code == 0, built.stderr
    root = tmp_path / "root"
    seed_containerd_node(root)
    installed = run_cli("install", str(bundle), "--keyring", str(operator_key.public), "--root", str(root))
    assert installed.exit_code == 0, installed.stderr
    assert dpkg_versions(root)["nvidia-container-toolkit"] == "1.99.0-1"


def test_a_file_that_is_not_a_gzipped_tar_is_refused_in_one_sentence(mirror: Path, tmp_path: Path) -> None:
    archive = tmp_path / f"nvidia-container-toolkit_{VERSION}_deb_amd64.tar.gz"
    archive.write_bytes(b"<html>404 Not Found</html>\n")
    result = run_cli("mirror", "import-archive", str(archive), "--mirror", str(mirror))
    assert result.exit_code == 3
    assert "is not a readable gzipped tar archive" in result.stderr and "Traceback" not in result.stderr


def test_prune_keeps_a_vouched_index_a_kept_release_needs(mirror: Path, tmp_path: Path) -> None:
    staged = build_target(tmp_path / "debs", "deb", "1.99.0-1", "amd64")
    archive = _archive(tmp_path, [p.path for p in staged.packages], version="1.99.0")
    assert (
        run_cli(
            "mirror", "import-archive", str(archive), "--mirror", str(mirror), "--trust-archive"
        ).exit_code
        == 0
    )
    vouched_index = mirror / "stable/deb/amd64/.vouched" / f"{archive.name}.json"
    assert run_cli("mirror", "prune", "--mirror", str(mirror), "--keep", "1").exit_code == 0
    repo = MirrorState.load(mirror).repo("stable/deb/amd64")
    assert repo is not None and [r.toolkit_version for r in repo.releases] == ["1.99.0-1"]
    assert [i.fingerprint for i in repo.retained] == ["operator-vouched"] and vouched_index.is_file()
    assert run_cli("mirror", "verify", "--mirror", str(mirror)).exit_code == 0
