"""The real-packages profile of the local upstream: NVIDIA's own 1.20.0-1 files, indexed with the real fields."""

from __future__ import annotations

import gzip
import os
import re
import shutil
from pathlib import Path

import pytest
from debian.deb822 import Packages

from tests.upstream import NVIDIA_BUILD, Prebuilt, UpstreamTree, checked_build, real_upstream, stop_agent
from tests.upstream.catalog import REAL_PACKAGES, load_templates, package_specs
from tests.upstream.prebuilt import prebuilt_installed_size

REAL_FILES = {
    "deb/amd64": (
        "nvidia-container-toolkit-base_1.20.0-1_amd64.deb",
        "nvidia-container-toolkit_1.20.0-1_amd64.deb",
    ),
    "rpm/x86_64": (
        "nvidia-container-toolkit-base-1.20.0-1.x86_64.rpm",
        "nvidia-container-toolkit-1.20.0-1.x86_64.rpm",
    ),
}
INDEX_FIELDS = ("Filename", "Size", "MD5sum", "SHA1", "SHA256", "SHA512", "Installed-Size")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> UpstreamTree:
    checked_build()  # in the repository: missing or changed fails here, it never skips
    cache = os.environ.get("GPU_AIRGAP_TEST_CACHE")
    built = real_upstream(
        Path(cache)
        if cache
        else tmp_path_factory.mktemp("c")
        if cache == ""
        else Path.home() / ".cache" / "gpu-airgap-tests"
    )
    stop_agent(built.gnupghome)
    return built


def stanzas(tree: UpstreamTree) -> dict[str, Packages]:
    with open(tree.deb_repo("stable", "amd64") / "Packages", encoding="ascii") as handle:
        return {p["Package"]: p for p in Packages.iter_paragraphs(handle, use_apt_pkg=False)}


def real_stanza(name: str) -> Packages:
    with open(REAL_PACKAGES, encoding="ascii") as handle:
        return next(
            p
            for p in Packages.iter_paragraphs(handle, use_apt_pkg=False)
            if p["Package"] == name and p["Version"] == "1.20.0-1"
        )


def test_the_toolkit_packages_are_nvidias_files_byte_for_byte(tree: UpstreamTree) -> None:
    for where, names in REAL_FILES.items():
        fmt, arch = where.split("/")
        repo = tree.deb_repo("stable", arch) if fmt == "deb" else tree.rpm_repo("stable", arch)
        for name in names:
            assert (repo / name).read_bytes() == (NVIDIA_BUILD / where / name).read_bytes()


def test_every_package_has_the_real_120_stanza_with_its_own_sizes(tree: UpstreamTree) -> None:
    ours = stanzas(tree)
    for name in (
        "libnvidia-container1",
        "libnvidia-container-tools",
        "nvidia-container-toolkit-base",
        "nvidia-container-toolkit",
    ):
        real = real_stanza(name)
        assert [k for k in ours[name]] == [k for k in real]
        assert {k: v for k, v in ours[name].items() if k not in INDEX_FIELDS} == {
            k: v for k, v in real.items() if k not in INDEX_FIELDS
        }
    # the real .deb's own Installed-Size, not NVIDIA's index figure (the Go build differs)
    assert ours["nvidia-container-toolkit-base"]["Installed-Size"] == "27676"


def test_the_profile_is_one_release_for_amd64_and_x86_64_only(tree: UpstreamTree) -> None:
    assert tree.stable_versions == ("1.20.0-1",) and tree.experimental_versions == ()
    assert sorted(p.name for p in (tree.root / "stable" / "deb").iterdir() if p.is_dir()) == ["amd64"]
    assert sorted(p.name for p in (tree.root / "stable" / "rpm").iterdir() if p.is_dir()) == ["x86_64"]
    assert not (tree.root / "experimental").exists()
    primary = next((tree.rpm_repo("stable", "x86_64") / "repodata").glob("*-primary.xml.gz"))
    assert (
        "libc.so.6(GLIBC_2.34)(64bit)" in gzip.decompress(primary.read_bytes()).decode()
    )  # the real rpm's own requires


def test_a_real_deb_whose_relations_disagree_with_the_index_is_refused() -> None:
    checked_build()  # in the repository: missing or changed fails here, it never skips
    templates = load_templates()
    spec = next(
        s
        for s in package_specs(("1.20.1-1",), arch="amd64", legacy=False, templates=templates)
        if s.name == "nvidia-container-toolkit"
    )
    with pytest.raises(ValueError, match=re.escape("Version is '1.20.0-1', the real index says '1.20.1-1'")):
        prebuilt_installed_size(spec, NVIDIA_BUILD / "deb/amd64" / REAL_FILES["deb/amd64"][1])


def test_a_changed_real_package_is_named_before_anything_is_built(tmp_path: Path) -> None:
    checked_build()  # in the repository: missing or changed fails here, it never skips
    copy = Path(shutil.copytree(NVIDIA_BUILD, tmp_path / "build"))
    target = copy / "rpm/x86_64" / REAL_FILES["rpm/x86_64"][1]
    target.chmod(0o644)
    target.write_bytes(target.read_bytes() + b"\0")
    assert Prebuilt(copy).missing_reason() == f"{target} does not match its SHA256SUMS line"
    assert Prebuilt(tmp_path / "absent").missing_reason().endswith("(no SHA256SUMS)")
    # they are in the repository: a test that needs them fails on a broken checkout, it does not skip
    with pytest.raises(FileNotFoundError, match=re.escape(f"{target} does not match its SHA256SUMS line: ")):
        checked_build(copy)
