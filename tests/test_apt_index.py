"""mirror.index.apt on NVIDIA's real Release and Packages, plus malformed inputs."""

from __future__ import annotations

from collections import Counter

import pytest

from mirror.errors import MetadataError
from mirror.index.apt import iter_packages, parse_packages, parse_relations, parse_release
from mirror.model import PackageFormat, Relation
from tests.gpgkeys import REAL

PACKAGES_TEXT = (REAL / "stable/deb/amd64/Packages").read_text()
# The text gpg verified: test_gpg proves verify_clearsigned returns exactly this.
RELEASE_TEXT = (
    (REAL / "stable/deb/amd64/InRelease").read_text().split("\n\n", 1)[1].split("-----BEGIN PGP SIGNATURE")[0]
)


def test_real_release_lists_both_indexes_with_sha512_and_size() -> None:
    release = parse_release(RELEASE_TEXT)
    assert release.files["Packages"].size == 178415
    assert release.files["Packages"].sha512.startswith("6ed6287c6bc0cd60")
    assert release.files["Packages.xz"].size == 28048
    assert release.fields["Codename"] == "stable"
    assert release.architectures == ["amd64"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("\n\n", "is empty"),
        ("Origin: x\nLabel: y\n", "lists no SHA512 checksums"),
        ("Origin: x\nSHA512:\n abc 10 Packages\n", "malformed SHA512 line for Packages"),
        ("Origin: x\n\nOrigin: y\n", "has 2 paragraphs"),
        (
            "Origin: x\nSHA512:\n " + "a" * 128 + " 1 Packages\n " + "b" * 128 + " 2 Packages\n",
            "Packages is listed twice",
        ),
    ],
    ids=["empty", "blank", "no-sha512", "malformed-digest", "two-paragraphs", "duplicate"],
)
def test_unusable_release_is_an_error_not_an_empty_repository(text: str, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        parse_release(text)


def test_real_packages_parses_170_stanzas_28_versions_each() -> None:
    packages = parse_packages(PACKAGES_TEXT)
    assert len(packages) == 170
    counts = Counter(p.name for p in packages)
    assert counts["nvidia-container-toolkit"] == counts["libnvidia-container1"] == 28
    assert counts["nvidia-docker2"] == counts["nvidia-container-runtime"] == 1
    assert all(p.format is PackageFormat.DEB and p.sha512 and p.sha256 and p.size > 0 for p in packages)


def test_toolkit_1_17_8_relations_are_and_of_or_groups() -> None:
    toolkit = next(
        p for p in parse_packages(PACKAGES_TEXT) if p.key == ("nvidia-container-toolkit", "1.17.8-1", "amd64")
    )
    assert toolkit.filename == "./nvidia-container-toolkit_1.17.8-1_amd64.deb"
    assert toolkit.depends == (
        (Relation("nvidia-container-toolkit-base", "=", "1.17.8-1"),),
        (Relation("libnvidia-container-tools", ">=", "1.17.8-1"),),
        (Relation("libnvidia-container-tools", "<<", "2.0.0"),),
    )
    assert toolkit.breaks == (
        (Relation("nvidia-container-runtime", "<=", "3.5.0-1"),),
        (Relation("nvidia-container-runtime-hook"),),
    )
    assert dict(toolkit.fields)["Maintainer"] == "NVIDIA CORPORATION <cudatools@nvidia.com>"


def test_alternatives_pre_depends_and_legacy_operators() -> None:
    text = (
        "Package: a\nVersion: 1\nArchitecture: all\nFilename: ./a.deb\nSize: 1\n"
        "Pre-Depends: p\nDepends: b (>= 1) | c, d (< 2), e:any (> 3)\nConflicts: f\nProvides: g (= 1)\n"
    )
    (package,) = parse_packages(text)
    assert package.depends == (
        (Relation("p"),),
        (Relation("b", ">=", "1"), Relation("c")),
        (Relation("d", "<=", "2"),),
        (Relation("e", ">=", "3"),),
    )
    assert package.conflicts == ((Relation("f"),),)
    assert package.provides == (Relation("g", "=", "1"),)
    assert parse_relations("x | y (>> 2)") == ((Relation("x"), Relation("y", ">>", "2")),)


@pytest.mark.parametrize(
    ("stanza", "message"),
    [
        ("Package: a\nVersion: 1\nArchitecture: all\nSize: 1\n", "lacks Filename"),
        ("Package: a\nVersion: 1\nArchitecture: all\nFilename: ./a.deb\nSize: big\n", "has a malformed Size"),
        (
            "Package: a\nVersion: 1\nArchitecture: all\nFilename: ./a.deb\nSize: 1\nSHA256: xyz\n",
            "has a malformed SHA256",
        ),
    ],
)
def test_malformed_stanza_is_an_error_naming_the_package(stanza: str, message: str) -> None:
    with pytest.raises(MetadataError, match=f"the Packages entry for a {message}"):
        parse_packages(stanza)


def test_single_line_text_is_never_read_as_a_file_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # python-debian treats a one-line str that names an existing file as a path; we never pass str.
    path = tmp_path / "Packages"
    path.write_text(PACKAGES_TEXT)
    assert parse_packages(str(path)) == []


def test_iter_packages_streams_from_a_file_object(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "Packages"
    path.write_text(PACKAGES_TEXT)
    with path.open() as handle:
        names = [p.name for p in iter_packages(handle)]
    assert len(names) == 170
