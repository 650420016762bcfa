"""The generated upstream is faithful to NVIDIA's real repositories (tests/data/real-upstream)."""

from __future__ import annotations

import gzip
import hashlib
import lzma
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from debian.deb822 import Packages

from tests.upstream import REAL_UPSTREAM, UpstreamTree, localize
from tests.upstream import build as build_mod
from tests.upstream.catalog import PackageSpec, choose_stable_versions, payload_for, rpm_relations
from tests.upstream.debs import build_deb, padding_file

REAL = REAL_UPSTREAM
REPOS = [("stable", "amd64"), ("stable", "arm64"), ("experimental", "amd64"), ("experimental", "arm64")]
RPM_REPOS = [
    ("stable", "x86_64"),
    ("stable", "aarch64"),
    ("experimental", "x86_64"),
    ("experimental", "aarch64"),
]


def signed_body(inrelease: bytes) -> str:
    """The text between the cleartext header and the signature (no verification: format checks only)."""
    text = inrelease.decode("ascii")
    return text.split("\n\n", 1)[1].split("-----BEGIN PGP SIGNATURE-----")[0]


def field_names(body: str) -> list[str]:
    return [line.split(":", 1)[0] for line in body.splitlines() if line and not line.startswith(" ")]


def stanzas(path: Path) -> list[Packages]:
    with open(path, encoding="ascii") as handle:
        return list(Packages.iter_paragraphs(handle, use_apt_pkg=False))


def real_stanza(name: str, version: str) -> Packages:
    for stanza in stanzas(REAL / "stable/deb/amd64/Packages"):
        if stanza["Package"] == name and stanza["Version"] == version:
            return stanza
    raise AssertionError(f"{name} {version} is not in the real index")


@pytest.mark.parametrize(("channel", "arch"), REPOS)
def test_inrelease_has_exactly_the_real_field_set_and_order(
    upstream_tree: UpstreamTree, channel: str, arch: str
) -> None:
    real = (REAL / "stable/deb/amd64/InRelease").read_bytes()
    ours = (upstream_tree.deb_repo(channel, arch) / "InRelease").read_bytes()
    assert ours.startswith(b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n")
    assert field_names(signed_body(ours)) == field_names(signed_body(real))
    body = signed_body(ours)
    assert f"Architectures: {arch}\n" in body and f"Codename: {channel}\n" in body
    assert "Valid-Until" not in body and "Suite" not in body and "MD5Sum" not in body


@pytest.mark.parametrize(("channel", "arch"), REPOS)
def test_inrelease_sha512_lines_match_packages_in_apt_ftparchive_layout(
    upstream_tree: UpstreamTree, channel: str, arch: str
) -> None:
    repo = upstream_tree.deb_repo(channel, arch)
    lines = [
        line for line in signed_body((repo / "InRelease").read_bytes()).splitlines() if line.startswith(" ")
    ]
    real_lines = [
        ln
        for ln in signed_body((REAL / "stable/deb/amd64/InRelease").read_bytes()).splitlines()
        if ln.startswith(" ")
    ]
    assert (
        [ln.split()[2] for ln in lines] == [ln.split()[2] for ln in real_lines] == ["Packages", "Packages.xz"]
    )
    for line in lines:
        digest, size, name = line.split()
        data = (repo / name).read_bytes()
        assert digest == hashlib.sha512(data).hexdigest() and int(size) == len(data)
        assert line == f" {digest} {size:>16} {name}"
    assert lzma.decompress((repo / "Packages.xz").read_bytes()) == (repo / "Packages").read_bytes()


@pytest.mark.parametrize(("channel", "arch"), REPOS)
def test_packages_field_order_matches_the_real_stanza_and_file_ends_with_blank_line(
    upstream_tree: UpstreamTree, channel: str, arch: str
) -> None:
    path = upstream_tree.deb_repo(channel, arch) / "Packages"
    assert path.read_bytes().endswith(b"\n\n") and not path.read_bytes().endswith(b"\n\n\n")
    for stanza in stanzas(path):
        model_version = stanza["Version"].split("~")[0].rsplit("-", 1)[0] + "-1"
        real = real_stanza(stanza["Package"], model_version)
        assert list(stanza.keys()) == list(real.keys()), stanza["Package"]
        assert stanza["Filename"] == f"./{stanza['Package']}_{stanza['Version']}_{stanza['Architecture']}.deb"


def test_stable_relations_are_exactly_the_real_ones(upstream_tree: UpstreamTree) -> None:
    for stanza in stanzas(upstream_tree.deb_repo("stable", "amd64") / "Packages"):
        real = real_stanza(stanza["Package"], stanza["Version"])
        for name in (
            "Depends",
            "Breaks",
            "Replaces",
            "Section",
            "Priority",
            "Multi-Arch",
            "Source",
            "Description",
        ):
            assert stanza.get(name) == real.get(name), (stanza["Package"], stanza["Version"], name)


def test_experimental_rc_uses_the_120_shape_with_its_own_version(upstream_tree: UpstreamTree) -> None:
    found = {s["Package"]: s for s in stanzas(upstream_tree.deb_repo("experimental", "amd64") / "Packages")}
    assert found["nvidia-container-toolkit"]["Version"] == "1.20.0~rc.1-1"
    assert found["nvidia-container-toolkit"]["Depends"] == (
        "nvidia-container-toolkit-base (= 1.20.0~rc.1-1), libnvidia-container-tools (= 1.20.0~rc.1-1)"
    )
    assert found["libnvidia-container-tools"]["Depends"].startswith(
        "libnvidia-container1 (= 1.20.0~rc.1-1), "
    )
    assert "nvidia-docker2" not in found


def test_packages_are_sorted_like_the_real_index(upstream_tree: UpstreamTree) -> None:
    real_order = [(s["Package"], s["Version"]) for s in stanzas(REAL / "stable/deb/amd64/Packages")]
    ours = [
        (s["Package"], s["Version"]) for s in stanzas(upstream_tree.deb_repo("stable", "amd64") / "Packages")
    ]
    assert ours == [pair for pair in real_order if pair in set(ours)]


@pytest.mark.parametrize(("channel", "arch"), REPOS)
def test_index_entries_describe_the_deb_files_built_by_dpkg_deb(
    upstream_tree: UpstreamTree, channel: str, arch: str
) -> None:
    repo = upstream_tree.deb_repo(channel, arch)
    debs = sorted(p.name for p in repo.glob("*.deb"))
    entries = stanzas(repo / "Packages")
    assert sorted(s["Filename"][2:] for s in entries) == debs
    for stanza in entries:
        deb = repo / stanza["Filename"]
        data = deb.read_bytes()
        assert int(stanza["Size"]) == len(data)
        assert stanza["SHA256"] == hashlib.sha256(data).hexdigest()
        assert stanza["SHA512"] == hashlib.sha512(data).hexdigest()
        control = subprocess.run(
            ["dpkg-deb", "--field", str(deb)], capture_output=True, check=True, text=True
        ).stdout
        assert f"Installed-Size: {stanza['Installed-Size']}\n" in control
        assert (
            f"Depends: {stanza['Depends']}\n" in control if "Depends" in stanza else "Depends:" not in control
        )


def test_architecture_all_packages_are_identical_in_every_arch_dir(upstream_tree: UpstreamTree) -> None:
    for name in ("nvidia-container-runtime_3.14.0-1_all.deb", "nvidia-docker2_2.14.0-1_all.deb"):
        amd = (upstream_tree.deb_repo("stable", "amd64") / name).read_bytes()
        arm = (upstream_tree.deb_repo("stable", "arm64") / name).read_bytes()
        assert amd == arm
    for name in ("nvidia-container-runtime-3.14.0-1.noarch.rpm", "nvidia-docker2-2.14.0-1.noarch.rpm"):
        assert (upstream_tree.rpm_repo("stable", "x86_64") / name).read_bytes() == (
            upstream_tree.rpm_repo("stable", "aarch64") / name
        ).read_bytes()


def gpgv(tree: UpstreamTree, tmp_path: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    keyring = tmp_path / "key.gpg"
    if not keyring.exists():
        armored = tree.public_key.read_bytes()
        keyring.write_bytes(
            subprocess.run(["gpg", "--dearmor"], input=armored, capture_output=True, check=True).stdout
        )
    return subprocess.run(
        ["gpgv", "--keyring", str(keyring), *map(str, files)], capture_output=True, text=True
    )


@pytest.mark.parametrize(("channel", "arch"), REPOS)
def test_gpgv_verifies_inrelease_with_the_generated_key(
    upstream_tree: UpstreamTree, tmp_path: Path, channel: str, arch: str
) -> None:
    result = gpgv(upstream_tree, tmp_path, upstream_tree.deb_repo(channel, arch) / "InRelease")
    assert result.returncode == 0, result.stderr
    assert upstream_tree.key_fingerprint[-16:] in result.stderr.replace(" ", "")


@pytest.mark.parametrize(("channel", "arch"), RPM_REPOS)
def test_gpgv_verifies_repomd_detached_signature(
    upstream_tree: UpstreamTree, tmp_path: Path, channel: str, arch: str
) -> None:
    repodata = upstream_tree.rpm_repo(channel, arch) / "repodata"
    assert (repodata / "repomd.xml.asc").read_bytes().startswith(b"-----BEGIN PGP SIGNATURE-----\n")
    assert gpgv(upstream_tree, tmp_path, repodata / "repomd.xml.asc", repodata / "repomd.xml").returncode == 0


def test_signatures_use_sha512_and_a_binary_sigclass_like_nvidia(upstream_tree: UpstreamTree) -> None:
    def packets(data: bytes) -> str:
        return subprocess.run(["gpg", "--list-packets"], input=data, capture_output=True).stdout.decode()

    repomd_sig = packets(
        (upstream_tree.rpm_repo("stable", "x86_64") / "repodata/repomd.xml.asc").read_bytes()
    )
    assert "digest algo 10" in repomd_sig and "sigclass 0x00" in repomd_sig
    inrelease = (upstream_tree.deb_repo("stable", "amd64") / "InRelease").read_bytes()
    armor = b"-----BEGIN PGP SIGNATURE-----" + inrelease.split(b"-----BEGIN PGP SIGNATURE-----")[1]
    clear_sig = packets(armor)
    assert "digest algo 10" in clear_sig and "sigclass 0x01" in clear_sig


def test_real_key_does_not_verify_generated_files(upstream_tree: UpstreamTree, tmp_path: Path) -> None:
    keyring = tmp_path / "nvidia.gpg"
    real_key = (REAL / "gpgkey").read_bytes()
    keyring.write_bytes(
        subprocess.run(["gpg", "--dearmor"], input=real_key, capture_output=True, check=True).stdout
    )
    inrelease = upstream_tree.deb_repo("stable", "amd64") / "InRelease"
    assert (
        subprocess.run(["gpgv", "--keyring", str(keyring), str(inrelease)], capture_output=True).returncode
        != 0
    )


def test_gpgkey_is_an_armored_public_key_without_secret_material(upstream_tree: UpstreamTree) -> None:
    text = upstream_tree.public_key.read_text(encoding="ascii")
    assert text.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert "PRIVATE" not in text
    assert upstream_tree.public_key == upstream_tree.root / "gpgkey"


@pytest.mark.parametrize(("channel", "arch"), RPM_REPOS)
def test_repomd_has_the_real_structure_and_checksums(
    upstream_tree: UpstreamTree, channel: str, arch: str
) -> None:
    ns = {"r": "http://linux.duke.edu/metadata/repo"}
    real = ET.parse(REAL / "stable/rpm/x86_64/repodata/repomd.xml").getroot()
    repo = upstream_tree.rpm_repo(channel, arch)
    ours = ET.parse(repo / "repodata/repomd.xml").getroot()
    assert ours.tag == real.tag and ours.findtext("r:revision", namespaces=ns) == "1.0"
    assert [d.get("type") for d in ours.findall("r:data", ns)] == [
        d.get("type") for d in real.findall("r:data", ns)
    ]
    assert [c.tag for c in ours.find("r:data", ns)] == [c.tag for c in real.find("r:data", ns)]  # type: ignore[union-attr]
    for data in ours.findall("r:data", ns):
        checksum = data.find("r:checksum", ns)
        href = data.find("r:location", ns).get("href")  # type: ignore[union-attr]
        assert checksum is not None and checksum.get("type") == "sha512"
        assert re.fullmatch(rf"repodata/{checksum.text}-{data.get('type')}\.xml\.gz", href or "")
        blob = (repo / (href or "")).read_bytes()
        assert hashlib.sha512(blob).hexdigest() == checksum.text
        assert hashlib.sha512(gzip.decompress(blob)).hexdigest() == data.findtext(
            "r:open-checksum", namespaces=ns
        )


def rpm_query(path: Path, what: str) -> list[str]:
    out = subprocess.run(
        ["rpm", "-qp", f"--{what}", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if not line.startswith("rpmlib(")]


def test_rpm_relations_mirror_the_deb_ones_in_rpm_syntax(upstream_tree: UpstreamTree) -> None:
    repo = upstream_tree.rpm_repo("stable", "x86_64")
    toolkit = repo / "nvidia-container-toolkit-1.17.8-1.x86_64.rpm"
    assert sorted(rpm_query(toolkit, "requires")) == [
        "libnvidia-container-tools < 2.0.0",
        "libnvidia-container-tools >= 1.17.8-1",
        "nvidia-container-toolkit-base = 1.17.8-1",
    ]
    assert rpm_query(toolkit, "conflicts") == [
        "nvidia-container-runtime <= 3.5.0-1",
        "nvidia-container-runtime-hook",
    ]
    assert rpm_query(toolkit, "obsoletes") == [
        "nvidia-container-runtime <= 3.5.0-1",
        "nvidia-container-runtime-hook",
    ]
    lib = repo / "libnvidia-container1-1.20.1-1.x86_64.rpm"
    assert sorted(rpm_query(lib, "requires")) == ["glibc >= 2.27", "libcap >= 2.10", "libseccomp"]
    tools = (
        upstream_tree.rpm_repo("experimental", "aarch64")
        / "libnvidia-container-tools-1.20.0~rc.1-1.aarch64.rpm"
    )
    assert sorted(rpm_query(tools, "requires")) == [
        "glibc >= 2.14",
        "libcap >= 2.10",
        "libnvidia-container1 = 1.20.0~rc.1-1",
    ]


def test_rpm_relation_translation_table() -> None:
    assert rpm_relations("libc6 (>= 2.14), libcap2 (>= 1:2.10), libnvidia-container1 (>= 1.17.8)") == [
        "glibc >= 2.14",
        "libcap >= 2.10",
        "libnvidia-container1 >= 1.17.8",
    ]
    assert rpm_relations("nvidia-docker (<< 2.0.0), foo (>> 1), bar") == [
        "nvidia-docker < 2.0.0",
        "foo > 1",
        "bar",
    ]
    assert rpm_relations(None) == []


def test_list_and_repo_files_are_nvidias_text(upstream_tree: UpstreamTree) -> None:
    for rel in ("stable/deb/nvidia-container-toolkit.list", "stable/rpm/nvidia-container-toolkit.repo"):
        assert (upstream_tree.root / rel).read_bytes() == (REAL / rel).read_bytes()
    exp_list = (upstream_tree.root / "experimental/deb/nvidia-container-toolkit.list").read_text()
    assert exp_list == "deb https://nvidia.github.io/libnvidia-container/experimental/deb/$(ARCH) /\n"
    assert len(exp_list) == 76
    exp_repo = (upstream_tree.root / "experimental/rpm/nvidia-container-toolkit.repo").read_text()
    assert (
        "[nvidia-container-toolkit-experimental]" in exp_repo
        and "[libnvidia-container-experimental]" in exp_repo
    )
    assert localize(exp_list, "http://127.0.0.1:9/") == "deb http://127.0.0.1:9/experimental/deb/$(ARCH) /\n"


def test_stand_in_payload_sits_at_real_paths_and_prints_its_version(
    upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    repo = upstream_tree.deb_repo("stable", "amd64")
    for deb in repo.glob("*_1.17.8-1_amd64.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    for tool in (
        "nvidia-ctk",
        "nvidia-container-runtime",
        "nvidia-container-runtime-hook",
        "nvidia-container-cli",
        "nvidia-cdi-hook",
    ):
        out = subprocess.run(
            [str(tmp_path / "usr/bin" / tool)], capture_output=True, text=True, check=True
        ).stdout
        assert out == f"{tool} version 1.17.8 (gpu-airgap stand-in)\n"
    assert (tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-container.so.1").is_file()
    assert "[nvidia-container-runtime]" in (tmp_path / "etc/nvidia-container-runtime/config.toml").read_text()
    base = repo / "nvidia-container-toolkit-base_1.17.8-1_amd64.deb"
    conffiles = subprocess.run(
        ["dpkg-deb", "--info", str(base), "conffiles"], capture_output=True, text=True, check=True
    )
    assert conffiles.stdout == "/etc/nvidia-container-runtime/config.toml\n"
    rpm = upstream_tree.rpm_repo("stable", "aarch64") / "nvidia-container-toolkit-base-1.20.1-1.aarch64.rpm"
    assert "/usr/bin/nvidia-ctk" in rpm_query(rpm, "list")
    assert rpm_query(rpm, "configfiles") == ["/etc/nvidia-container-runtime/config.toml"]


def test_padding_is_deterministic_incompressible_and_lands_in_the_deb(tmp_path: Path) -> None:
    spec = PackageSpec(
        "nvidia-container-toolkit",
        "1.17.8-1",
        "amd64",
        (("Package", "x"),),
        payload_for("x", "1.0-1", "amd64"),
    )
    pad = padding_file(spec, 0.25)
    assert pad == padding_file(spec, 0.25) and len(pad) == 256 * 1024
    assert len(lzma.compress(pad, preset=0)) > 0.99 * len(pad)
    real_spec = PackageSpec(
        "nvidia-docker2",
        "2.14.0-1",
        "all",
        tuple(real_stanza("nvidia-docker2", "2.14.0-1").items()),
        payload_for("nvidia-docker2", "2.14.0-1", "all"),
    )
    deb, installed = build_deb(real_spec, tmp_path, tmp_path, payload_mb=0.25)
    assert deb.stat().st_size > 256 * 1024 and installed >= 256


def test_extra_versions_come_from_the_real_index_newest_first() -> None:
    available = ["1.20.1-1", "1.20.0-1", "1.19.1-1", "1.19.0-1"]
    assert choose_stable_versions(("1.20.1-1",), 2, available) == ("1.19.1-1", "1.20.0-1", "1.20.1-1")
    with pytest.raises(ValueError, match="only 3 more"):
        choose_stable_versions(("1.20.1-1",), 4, available)


def test_cached_upstream_builds_once_per_input_and_reuses_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, object]] = []

    def fake_build(dest: Path, **params: object) -> UpstreamTree:
        calls.append(params)
        (dest / "site").mkdir(parents=True)
        return UpstreamTree(
            dest / "site", "F" * 40, dest / "site/gpgkey", dest / "gnupg", ("1.17.8-1",), (), 0.0, 1.0
        )

    monkeypatch.setattr(build_mod, "build_upstream", fake_build)
    first = build_mod.cached_upstream(tmp_path)
    second = build_mod.cached_upstream(tmp_path)
    third = build_mod.cached_upstream(tmp_path, payload_mb=1.0)
    assert first == second and first.root.is_dir()
    assert third.root != first.root
    assert calls == [{}, {"payload_mb": 1.0}]
    assert not list(tmp_path.glob("*.partial-*"))


def test_default_tree_builds_well_under_a_minute(upstream_tree: UpstreamTree) -> None:
    assert 0 < upstream_tree.build_seconds < 60
    assert upstream_tree.stable_versions == ("1.17.8-1", "1.18.0-1", "1.20.1-1")
    assert upstream_tree.experimental_versions == ("1.20.0~rc.1-1",)
