"""Signed offline bundles end to end: a mirror synced from the local upstream, built, inspected, verified, tampered with.

The bundles are built once per session (uncompressed, so single bytes can be flipped in place,
and zstd for the default path) from a real ``mirror sync`` of the local upstream, signed with a
throwaway operator key. Everything runs with real gpg, tar, apt-get, dnf and python3 -I.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import random
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from installer import archive
from installer.bundle import BundleVerificationError, extract_verified, verify
from installer.manifest import MANIFEST_NAME, SIGNATURE_NAME
from installer.manifest_parser import parse_manifest
from mirror.bundle.build import BuildResult, build_bundle
from mirror.bundle.source import SourceError
from mirror.bundle.split_head import head_size
from mirror.bundle.zipapp import Wheel, vendored_wheels
from mirror.release.lockfile import Lockfile
from plumbing.gpg import Keyring
from tests.cli_runner import run_bundle_build, run_cli
from tests.clock import clock_moved_on
from tests.gpgkeys import TestKey
from tests.test_upstream_clients import apt, dnf
from tests.upstream import UpstreamTree

PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")
TARGETS = [("deb", "amd64"), ("rpm", "x86_64")]


@pytest.fixture(scope="session")
def epoch(operator_key: TestKey) -> int:
    """A fixed SOURCE_DATE_EPOCH for the session, after the operator key was created."""
    return int(time.time())


def _build(mirror: Path, key: TestKey, output: Path, epoch: int, **kwargs: object) -> BuildResult:
    """``build_bundle`` of 1.17.8 for TARGETS, signed by ``key``; ``kwargs`` add to or override that."""
    chosen = {"version": "1.17.8", "channel": None, "targets": list(TARGETS), **kwargs}
    return build_bundle(
        mirror,
        sign_key=key.fingerprint,
        gnupghome=key.home,
        output=output,
        epoch=epoch,
        **chosen,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
def plain_bundle(
    synced_mirror: Path, operator_key: TestKey, epoch: int, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """An uncompressed bundle (member bytes sit in the file as-is, so they can be flipped in place)."""
    out = tmp_path_factory.mktemp("plain") / "bundle.tar"
    _build(synced_mirror, operator_key, out, epoch, compression="none")
    return out


@pytest.fixture(scope="session")
def operator_keyring(operator_key: TestKey) -> Iterator[Keyring]:
    with Keyring.open([operator_key.public]) as keyring:
        yield keyring


def _member_offsets(path: Path) -> dict[str, tuple[int, int]]:
    with tarfile.open(path) as tar:
        return {m.name: (m.offset_data, m.size) for m in tar.getmembers()}


def _rewrite(src: Path, dst: Path, *, drop: str | None = None, add: tuple[str, bytes] | None = None) -> None:
    with tarfile.open(src) as old, tarfile.open(dst, "w", format=tarfile.GNU_FORMAT) as new:
        for member in old.getmembers():
            if member.name != drop:
                new.addfile(member, old.extractfile(member))
        if add is not None:
            info = tarfile.TarInfo(add[0])
            info.size = len(add[1])
            new.addfile(info, io.BytesIO(add[1]))


# -- build, inspect, verify ----------------------------------------------------------------------


@pytest.mark.slow
def test_cli_builds_from_a_synced_mirror_and_inspect_and_verify_pass(
    synced_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    out = tmp_path / "bundle.tar.zst"
    built = run_bundle_build(synced_mirror, operator_key, out, "--target", "rpm/x86_64", "--json")
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["targets"] == ["deb/amd64", "rpm/x86_64"]
    assert archive.detect_compression(out.read_bytes()[:8]) == "zstd"

    inspected = run_cli("bundle", "inspect", str(out), "--json")
    assert inspected.exit_code == 0, inspected.stderr
    data = json.loads(inspected.stdout)
    assert data["signer"] == operator_key.fingerprint and data["toolkit_version"] == "1.17.8"
    deb = next(t for t in data["targets"] if t["format"] == "deb")
    assert [p["name"] for p in deb["packages"]] == [
        "libnvidia-container1",
        "libnvidia-container-tools",
        "nvidia-container-toolkit-base",
        "nvidia-container-toolkit",
    ]
    assert {p["version"] for p in deb["packages"]} == {"1.17.8-1"}
    assert deb["provenance"]["signed_files"] and "libc6 (>= 2.14)" in deb["node_requirements"]

    verified = run_cli("bundle", "verify", str(out), "--keyring", str(operator_key.public), "--json")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["ok"] and report["signer"] == operator_key.fingerprint and report["members_checked"] == 24
    assert (
        report["node_check"] is True
    )  # NODE-SHA256SUMS and its signature, checked against the manifest and the key


def test_locked_build_takes_exactly_the_lockfile_set_and_refuses_a_set_the_mirror_lacks(
    synced_mirror: Path, operator_key: TestKey, epoch: int, tmp_path: Path
) -> None:
    lock = Lockfile.load(synced_mirror / "gpu-airgap.lock")

    def locked_build(name: str, locked: Lockfile) -> BuildResult:
        options = {"version": "latest", "targets": [], "compression": "none", "locked": locked}
        return _build(synced_mirror, operator_key, tmp_path / name, epoch, **options)

    result = locked_build("b.tar", lock)
    for locked, target in zip(lock.targets, result.manifest.targets):
        assert [(p.name, p.version, p.size) for p in locked.packages] == [
            (p.name, p.version, p.size) for p in target.packages
        ]
    changed = dataclasses.replace(lock.targets[0].packages[0], size=lock.targets[0].packages[0].size + 1)
    bad_target = dataclasses.replace(lock.targets[0], packages=(changed, *lock.targets[0].packages[1:]))
    with pytest.raises(SourceError, match="does not hold the locked set"):
        locked_build("c.tar", dataclasses.replace(lock, targets=(bad_target,)))
    assert not (tmp_path / "c.tar").exists()


def test_flipping_any_single_byte_of_any_member_fails_verify_naming_it(
    plain_bundle: Path, operator_keyring: Keyring, tmp_path: Path
) -> None:
    offsets = _member_offsets(plain_bundle)
    assert len(offsets) == 24
    original = plain_bundle.read_bytes()
    for name, (offset, size) in offsets.items():
        data = bytearray(original)
        data[offset + size // 2] ^= 0x01
        copy = tmp_path / "tampered.tar"
        copy.write_bytes(bytes(data))
        report = verify(copy, operator_keyring)
        assert not report.ok, name
        assert report.first_bad == name, (name, [str(p) for p in report.problems])


def test_a_removed_member_fails_verify_naming_it(
    plain_bundle: Path, operator_keyring: Keyring, tmp_path: Path
) -> None:
    victim = "targets/deb-amd64/nvidia-container-toolkit_1.17.8-1_amd64.deb"
    _rewrite(plain_bundle, tmp_path / "b.tar", drop=victim)
    report = verify(tmp_path / "b.tar", operator_keyring)
    assert report.first_bad == victim and "missing from the archive" in report.problems[0].message


def test_an_added_member_fails_verify_naming_it(
    plain_bundle: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    _rewrite(plain_bundle, tmp_path / "b.tar", add=("targets/deb-amd64/evil_1.0_amd64.deb", b"payload"))
    result = run_cli("bundle", "verify", str(tmp_path / "b.tar"), "--keyring", str(operator_key.public))
    assert result.exit_code == 3
    assert "targets/deb-amd64/evil_1.0_amd64.deb: is not listed in the signed manifest" in result.stderr


def test_bytes_appended_after_the_end_of_the_archive_are_refused_but_zero_padding_is_not(
    plain_bundle: Path, operator_key: TestKey, operator_keyring: Keyring, tmp_path: Path
) -> None:
    padded = tmp_path / "padded.tar"
    padded.write_bytes(plain_bundle.read_bytes() + bytes(20 * 512))  # what tar -b and dd leave behind
    assert verify(padded, operator_keyring).ok
    appended = tmp_path / "appended.tar"
    appended.write_bytes(plain_bundle.read_bytes() + b"#!/bin/sh\necho not signed by anyone\n")
    report = verify(appended, operator_keyring)
    assert [str(p) for p in report.problems] == ["appended.tar: has data after the end of the archive"]
    result = run_cli("bundle", "verify", str(appended), "--keyring", str(operator_key.public))
    assert result.exit_code == 3
    assert "appended.tar: has data after the end of the archive" in result.stderr


def test_a_replaced_signature_fails_verify_naming_the_signature(
    plain_bundle: Path, other_key: TestKey, tmp_path: Path, operator_keyring: Keyring
) -> None:
    with tarfile.open(plain_bundle) as tar:
        manifest = tar.extractfile(MANIFEST_NAME).read()  # type: ignore[union-attr]
    forged = other_key.sign_detached(manifest)
    with (
        tarfile.open(plain_bundle) as old,
        tarfile.open(tmp_path / "b.tar", "w", format=tarfile.GNU_FORMAT) as new,
    ):
        for member in old.getmembers():
            if member.name == SIGNATURE_NAME:
                member.size = len(forged)
                new.addfile(member, io.BytesIO(forged))
            else:
                new.addfile(member, old.extractfile(member))
    report = verify(tmp_path / "b.tar", operator_keyring)
    assert report.first_bad == SIGNATURE_NAME
    assert "not in the trusted keyring" in report.problems[0].message


def test_a_keyring_without_the_signing_key_fails_verify(plain_bundle: Path, other_key: TestKey) -> None:
    with Keyring.open([other_key.public]) as keyring:
        report = verify(plain_bundle, keyring)
    assert not report.ok and report.first_bad == SIGNATURE_NAME
    with pytest.raises(BundleVerificationError, match=r"failed verification at manifest\.json\.asc"):
        report.raise_for_problems()


# -- what the bundle carries works on a node ---------------------------------------------------


@pytest.fixture(scope="session")
def extracted(
    plain_bundle: Path, operator_keyring: Keyring, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return extract_verified(plain_bundle, operator_keyring, tmp_path_factory.mktemp("staging")).root


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is not installed")
def test_embedded_apt_repo_is_accepted_by_a_real_sandboxed_apt_get_update(
    extracted: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    sandbox = tmp_path / "apt"
    for sub in (
        "state/lists/partial",
        "cache/archives/partial",
        "sources.list.d",
        "apt.conf.d",
        "preferences.d",
    ):
        (sandbox / sub).mkdir(parents=True)
    (sandbox / "state/status").touch()
    keyring = sandbox / "operator.gpg"
    keyring.write_bytes(
        subprocess.run(
            ["gpg", "--dearmor"], input=operator_key.public.read_bytes(), capture_output=True, check=True
        ).stdout
    )
    (sandbox / "sources.list").write_text(
        f"deb [signed-by={keyring}] file:{extracted / 'targets/deb-amd64'} ./\n"
    )
    update = apt(sandbox, "update")
    assert update.returncode == 0 and "W:" not in update.stderr, update.stdout + update.stderr
    policy = subprocess.run(
        [
            "apt-cache",
            "-o",
            f"Dir::State={sandbox / 'state'}",
            "-o",
            f"Dir::Cache={sandbox / 'cache'}",
            "-o",
            f"Dir::Etc::SourceList={sandbox / 'sources.list'}",
            "-o",
            f"Dir::Etc::SourceParts={sandbox / 'sources.list.d'}",
            "policy",
            "nvidia-container-toolkit",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "1.17.8-1" in policy.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("dnf") is None, reason="dnf is not installed")
def test_embedded_yum_repo_verifies_with_gpg_and_is_read_by_dnf(
    extracted: Path,
    operator_keyring: Keyring,
    operator_key: TestKey,
    tmp_path: Path,
    upstream_tree: UpstreamTree,
) -> None:
    repodata = extracted / "targets/rpm-x86_64/repodata"
    operator_keyring.verify_detached(
        (repodata / "repomd.xml").read_bytes(), (repodata / "repomd.xml.asc").read_bytes()
    )
    repo_url = (extracted / "targets/rpm-x86_64").as_uri()
    # Reuse the upstream engineer's sandboxed dnf with a tree whose .repo points at our local repo.
    fake = tmp_path / "tree"
    (fake / "stable/rpm").mkdir(parents=True)
    (fake / "stable/rpm/nvidia-container-toolkit.repo").write_text(
        f"[bundle]\nname=bundle\nbaseurl={repo_url}\nrepo_gpgcheck=1\ngpgcheck=0\nenabled=1\n"
        f"gpgkey=https://nvidia.github.io/libnvidia-container/gpgkey\n"
    )
    tree = UpstreamTree(fake, operator_key.fingerprint, operator_key.public, operator_key.home, (), ())
    result = dnf(tmp_path, tree, repo_url, "repoquery", "--available", "--repo", "bundle")
    assert result.returncode == 0, result.stderr
    assert "nvidia-container-toolkit-0:1.17.8-1.x86_64" in result.stdout.split()


@pytest.mark.parametrize("python", [Path(sys.executable), PY39], ids=["host-python", "python3.9"])
def test_extracted_zipapp_runs_help_without_site_packages(extracted: Path, python: Path) -> None:
    if not python.exists():
        pytest.skip(f"{python} is not installed")
    result = subprocess.run(
        [str(python), "-I", str(extracted / "gpu-airgap-node.pyz"), "bundle", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    assert "verify" in result.stdout and "inspect" in result.stdout


def test_the_node_zipapp_ships_no_test_double(extracted: Path) -> None:
    with zipfile.ZipFile(extracted / "gpu-airgap-node.pyz") as pyz:
        names = pyz.namelist()
    ours = [n for n in names if n.split("/", 1)[0] in ("plumbing", "configure", "installer", "tests")]
    assert "installer/backends/dpkg.py" in ours  # the node sources are there, so the check below is real
    assert [n for n in ours if "fake" in n.lower() or n.startswith("tests/")] == []


def test_manifest_and_sbom_carry_everything_the_bundle_promises(plain_bundle: Path, epoch: int) -> None:
    members = _members(plain_bundle)
    manifest = parse_manifest(members[MANIFEST_NAME][1])
    assert manifest.schema == 1 and manifest.tool_version and manifest.channel == "stable"
    assert manifest.created == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    assert manifest.upstream_url.startswith("http://127.0.0.1") and len(manifest.upstream_fingerprint) == 40
    # Every member but the manifest and its signature is listed with its size and sha256.
    listed = manifest.members()
    assert set(listed) == set(members) - {MANIFEST_NAME, SIGNATURE_NAME}
    for name, (size, sha256) in listed.items():
        assert (size, sha256) == (len(members[name][1]), hashlib.sha256(members[name][1]).hexdigest()), name
    for target in manifest.targets:
        prov = target.provenance
        assert prov.fingerprint == manifest.upstream_fingerprint and prov.signed_files
        assert all(f.sha256 or f.sha512 for f in prov.signed_files)
        assert target.node_requirements
        for pkg in target.packages:
            assert pkg.origin.startswith(prov.upstream_url) and pkg.file.startswith(target.repo_dir + "/")
        toolkit = {p.name: p for p in target.packages}["nvidia-container-toolkit"]
        assert toolkit.depends and toolkit.breaks is not None
        assert any(b.startswith("nvidia-container-runtime") for b in toolkit.breaks), toolkit.breaks
    sbom = json.loads(members["sbom.spdx.json"][1])
    assert sbom["spdxVersion"] == "SPDX-2.3"
    listed_packages = {(p.name, p.version, p.sha256, p.origin) for t in manifest.targets for p in t.packages}
    assert {
        (p["name"], p["versionInfo"], p["checksums"][0]["checksumValue"], p["downloadLocation"])
        for p in sbom["packages"]
    } == listed_packages


def test_creation_time_comes_from_source_date_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    from mirror.hostenv import build_epoch
    from plumbing.errors import UsageError

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert build_epoch() == 1700000000
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH='yesterday' is not a number"):
        build_epoch()


def test_split_size_takes_binary_units_and_refuses_what_is_not_a_size() -> None:
    from mirror.bundle.build import parse_size
    from plumbing.errors import UsageError

    assert [parse_size(s) for s in ("650M", "650MiB", "1.5g", "4GB", "1048576")] == [
        650 << 20,
        650 << 20,
        3 << 29,
        4 << 30,
        1 << 20,
    ]
    for bad in ("lots", "M", "infM", "1e999G", "nanK"):
        with pytest.raises(UsageError, match=f"--split '{bad}' is not a size like 650M or 4G"):
            parse_size(bad)


# -- determinism, compression, split -------------------------------------------------------------


def _members(path: Path) -> dict[str, tuple[bytes, bytes]]:
    with archive.open_stream(path) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        return {m.name: (m.tobuf(tarfile.GNU_FORMAT), tar.extractfile(m).read()) for m in tar}  # type: ignore[union-attr]


@pytest.mark.slow
def test_two_builds_with_the_same_epoch_are_byte_identical_apart_from_the_signature(
    synced_mirror: Path, operator_key: TestKey, epoch: int, tmp_path: Path
) -> None:
    first = _build(synced_mirror, operator_key, tmp_path / "a.tar.zst", epoch).outputs[0]
    with clock_moved_on():  # a day later, without waiting for it: the clock must not leak into the bytes
        second = _build(synced_mirror, operator_key, tmp_path / "b.tar.zst", epoch).outputs[0]
    a, b = _members(first), _members(second)
    assert list(a) == list(b) and list(a)[:2] == [MANIFEST_NAME, SIGNATURE_NAME]
    differing = [name for name in a if a[name] != b[name]]
    assert differing in ([], [SIGNATURE_NAME])
    with tarfile.open(fileobj=io.BytesIO(b"".join(h + d for h, d in a.values()) + b"\0" * 1024)) as tar:
        assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in tar.getmembers()} == {
            (0, 0, "", "", epoch)
        }


@pytest.mark.parametrize("compression", ["gzip", "xz"])
def test_gzip_and_xz_bundles_verify(
    synced_mirror: Path,
    operator_key: TestKey,
    epoch: int,
    tmp_path: Path,
    operator_keyring: Keyring,
    compression: str,
) -> None:
    out = _build(synced_mirror, operator_key, tmp_path / "bundle", epoch, compression=compression).outputs[0]
    assert archive.detect_compression(out.read_bytes()[:8]) == compression
    assert verify(out, operator_keyring).ok


def test_zstd_bundle_verifies_through_the_zstd_command_when_the_module_is_missing(
    synced_mirror: Path,
    operator_key: TestKey,
    epoch: int,
    tmp_path: Path,
    operator_keyring: Keyring,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = _build(synced_mirror, operator_key, tmp_path / "bundle.tar.zst", epoch).outputs[0]
    monkeypatch.setattr(archive, "_have_zstandard", lambda: False)
    report = verify(out, operator_keyring)
    assert report.ok, [str(p) for p in report.problems]
    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "bad.tar.zst").write_bytes(bytes(data))
    assert not verify(tmp_path / "bad.tar.zst", operator_keyring).ok


def padded_wheels(size: int) -> list[Wheel]:
    """The node wheels plus one of ``size`` incompressible bytes, so a bundle spans several parts."""
    padding = io.BytesIO()
    with zipfile.ZipFile(padding, "w") as zf:
        zf.writestr("padding/padding.bin", random.Random(0).randbytes(size))
    return [*vendored_wheels(), Wheel("padding-0-py3-none-any.whl", padding.getvalue())]


def test_split_bundle_verifies_from_its_first_part_and_a_bad_part_is_named(
    synced_mirror: Path, operator_key: TestKey, epoch: int, tmp_path: Path, operator_keyring: Keyring
) -> None:
    wheels = padded_wheels(3 << 20)  # the bundle alone is under 1 MiB
    # The first part must hold the node check whole (the zipapp is most of it), so the part size goes
    # halfway between the end of the node check and the end of the archive: two parts.
    probe = _build(
        synced_mirror, operator_key, tmp_path / "probe.tar", epoch, compression="none", node_wheels=wheels
    ).outputs[0]
    with tarfile.open(probe) as tar:
        head = head_size([m.size for m in tar.getmembers()[:6]])
    split = head + (probe.stat().st_size - head) // 2
    result = _build(
        synced_mirror,
        operator_key,
        tmp_path / "bundle.tar",
        epoch,
        compression="none",
        split=split,
        node_wheels=wheels,
    )
    names = [p.name for p in result.outputs]
    parts = [n for n in names if ".part" in n]
    assert len(parts) == 2 and parts == [f"bundle.tar.part{i:03d}" for i in range(1, len(parts) + 1)]
    assert names[len(parts) :] == ["bundle.tar.sha256sums", "bundle.tar.sha256sums.asc"]
    assert all((tmp_path / n).stat().st_size == split for n in parts[:-1])
    assert verify(tmp_path / "bundle.tar.part001", operator_keyring).ok
    staged = extract_verified(tmp_path / "bundle.tar.part001", operator_keyring, tmp_path / "staging")
    assert parse_manifest((staged.root / MANIFEST_NAME).read_bytes()) == staged.manifest
    part = tmp_path / parts[-1]
    data = bytearray(part.read_bytes())
    data[10] ^= 0x01
    part.write_bytes(bytes(data))
    report = verify(tmp_path / "bundle.tar.part001", operator_keyring)
    assert not report.ok and any(f"part {parts[-1]} does not match" in str(p) for p in report.problems)
