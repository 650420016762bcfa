"""mirror.index.repo through FakeFetcher: verify, check, parse; provenance; failure modes."""

from __future__ import annotations

import gzip
import hashlib
import lzma
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mirror.disk.trust import NVIDIA_FINGERPRINT
from mirror.errors import MetadataError
from mirror.index.repo import (
    clean_relative,
    load_apt_repo,
    load_yum_repo,
    repo_path,
    repo_url,
)
from mirror.index.rpm import parse_repomd
from mirror.model import PackageFormat
from mirror.release.selectors import VersionSelector
from mirror.sync.resolve import resolve
from plumbing.arch import known_arch, normalize_arch
from plumbing.errors import ChecksumMismatch, ExitCode, SignatureError, UnsafePathError, UsageError
from plumbing.gpg import Keyring
from tests.fakes import FakeFetcher
from tests.gpgkeys import REAL, TestKey
from tests.rpmrepo import build_yum_repo

BASE = "http://127.0.0.1:1/stable/deb/amd64"
YUM = "http://127.0.0.1:1/stable/rpm/x86_64"
INRELEASE = (REAL / "stable/deb/amd64/InRelease").read_bytes()
PACKAGES = (REAL / "stable/deb/amd64/Packages").read_bytes()
PACKAGES_XZ = lzma.compress(PACKAGES)


class NotFound(UsageError):
    """What a real fetcher raises for a 404 (any ToolError with status 404)."""

    status = 404

    def __init__(self, url: str) -> None:
        super().__init__(f"HTTP 404 while fetching {url}")


def release_text(files: dict[str, bytes]) -> str:
    lines = "".join(
        f" {hashlib.sha512(data).hexdigest()} {len(data):>16} {name}\n" for name, data in files.items()
    )
    return f"Origin: test\nLabel: test\nArchitectures: amd64\nSHA512:\n{lines}"


def signed_inrelease(key: TestKey, files: dict[str, bytes]) -> bytes:
    return key.clearsign(release_text(files))


class TestApt:
    def test_real_nvidia_repo_loads_with_provenance(self, nvidia: Keyring) -> None:
        fetcher = (
            FakeFetcher()
            .expect(f"{BASE}/InRelease", INRELEASE)
            .expect_error(f"{BASE}/Packages.xz", NotFound("x"))
        )
        fetcher.expect(f"{BASE}/Packages", PACKAGES)
        snapshot = load_apt_repo(fetcher, BASE + "/", nvidia)
        fetcher.assert_all_used()
        assert len(snapshot.packages) == 170
        assert snapshot.format is PackageFormat.DEB
        assert snapshot.base_url == BASE
        assert snapshot.fingerprint == NVIDIA_FINGERPRINT
        assert snapshot.signed_at == datetime(2026, 9, 18, 21, 9, 4, tzinfo=timezone.utc)
        assert [(m.path, m.data, m.sha256) for m in snapshot.metadata] == [
            ("InRelease", INRELEASE, hashlib.sha256(INRELEASE).hexdigest()),
            ("Packages", PACKAGES, hashlib.sha256(PACKAGES).hexdigest()),
        ]
        assert snapshot.release is not None and snapshot.release.files["Packages.xz"].size == 28048
        resolution = resolve(snapshot.packages, VersionSelector.parse("1.17.8"), snapshot.format)
        urls = [snapshot.package_url(p) for p in resolution.packages]
        assert urls[0] == f"{BASE}/libnvidia-container1_1.17.8-1_amd64.deb"

    def test_packages_xz_is_preferred_and_checked_inside_and_out(
        self, test_key: TestKey, trusting: Keyring
    ) -> None:
        inrelease = signed_inrelease(test_key, {"Packages": PACKAGES, "Packages.xz": PACKAGES_XZ})
        fetcher = (
            FakeFetcher().expect(f"{BASE}/InRelease", inrelease).expect(f"{BASE}/Packages.xz", PACKAGES_XZ)
        )
        snapshot = load_apt_repo(fetcher, BASE, trusting)
        fetcher.assert_all_used()
        assert len(snapshot.packages) == 170
        assert [m.path for m in snapshot.metadata] == ["InRelease", "Packages.xz"]
        assert snapshot.metadata[1].data == PACKAGES_XZ
        assert snapshot.fingerprint == test_key.fingerprint

    def test_checksum_mismatch_of_packages_xz_is_refused(self, test_key: TestKey, trusting: Keyring) -> None:
        inrelease = signed_inrelease(test_key, {"Packages.xz": PACKAGES_XZ})
        tampered = PACKAGES_XZ[:-1] + bytes([PACKAGES_XZ[-1] ^ 1])
        fetcher = FakeFetcher().expect(f"{BASE}/InRelease", inrelease).expect(f"{BASE}/Packages.xz", tampered)
        with pytest.raises(ChecksumMismatch, match=r"Packages\.xz does not match its signed checksum"):
            load_apt_repo(fetcher, BASE, trusting)

    def test_size_mismatch_of_packages_is_refused(self, test_key: TestKey, trusting: Keyring) -> None:
        inrelease = signed_inrelease(test_key, {"Packages": PACKAGES})
        fetcher = (
            FakeFetcher().expect(f"{BASE}/InRelease", inrelease).expect(f"{BASE}/Packages", PACKAGES + b"\n")
        )
        with pytest.raises(ChecksumMismatch, match=r"Packages \(size\).*expected 178415 bytes"):
            load_apt_repo(fetcher, BASE, trusting)

    def test_tampered_packages_inside_a_matching_xz_is_refused(
        self, test_key: TestKey, trusting: Keyring
    ) -> None:
        tampered = PACKAGES.replace(b"Version: 1.17.8-1", b"Version: 1.17.8-9", 1)
        xz = lzma.compress(tampered)
        inrelease = signed_inrelease(test_key, {"Packages": PACKAGES, "Packages.xz": xz})
        fetcher = FakeFetcher().expect(f"{BASE}/InRelease", inrelease).expect(f"{BASE}/Packages.xz", xz)
        with pytest.raises(ChecksumMismatch, match=r"Packages \(inside Packages.xz\)"):
            load_apt_repo(fetcher, BASE, trusting)

    def test_inrelease_by_another_key_stops_before_any_index_is_fetched(
        self, other_key: TestKey, trusting: Keyring
    ) -> None:
        fetcher = FakeFetcher().expect(
            f"{BASE}/InRelease", signed_inrelease(other_key, {"Packages": PACKAGES})
        )
        with pytest.raises(SignatureError, match="not in the trusted keyring"):
            load_apt_repo(fetcher, BASE, trusting)
        assert fetcher.requested == [f"{BASE}/InRelease"]

    def test_empty_signed_inrelease_is_an_error_naming_its_url(
        self, test_key: TestKey, trusting: Keyring
    ) -> None:
        empty = test_key.clearsign("")
        fetcher = FakeFetcher().expect(f"{BASE}/InRelease", empty)
        with pytest.raises(MetadataError) as caught:
            load_apt_repo(fetcher, BASE, trusting)
        assert str(caught.value).startswith(f"the signed {BASE}/InRelease is empty;")

    def test_server_error_on_packages_xz_is_not_papered_over(
        self, test_key: TestKey, trusting: Keyring
    ) -> None:
        inrelease = signed_inrelease(test_key, {"Packages": PACKAGES, "Packages.xz": PACKAGES_XZ})
        fetcher = FakeFetcher().expect(f"{BASE}/InRelease", inrelease)
        fetcher.expect_error(f"{BASE}/Packages.xz", UsageError("HTTP 503")).expect(
            f"{BASE}/Packages", PACKAGES
        )
        with pytest.raises(UsageError, match="HTTP 503"):
            load_apt_repo(fetcher, BASE, trusting)

    def test_corrupt_xz_that_matches_its_checksum_is_a_metadata_error(
        self, test_key: TestKey, trusting: Keyring
    ) -> None:
        junk = b"\xfd7zXZ\x00" + b"junk" * 10
        fetcher = FakeFetcher().expect(f"{BASE}/InRelease", signed_inrelease(test_key, {"Packages.xz": junk}))
        fetcher.expect(f"{BASE}/Packages.xz", junk)
        with pytest.raises(MetadataError, match="cannot be decoded"):
            load_apt_repo(fetcher, BASE, trusting)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_yum_repo(tmp_path_factory.mktemp("yum") / "x86_64", ["1.17.8", "1.17.9", "1.18.0"])


class TestYum:
    def fetcher_for(self, repo: Path, key: TestKey, *, primary: bytes | None = None) -> FakeFetcher:
        repomd = (repo / "repodata/repomd.xml").read_bytes()
        href = parse_repomd(repomd).data["primary"].href
        fetcher = FakeFetcher().expect(f"{YUM}/repodata/repomd.xml", repomd)
        fetcher.expect(
            f"{YUM}/repodata/repomd.xml.asc",
            key.sign_detached(repomd),
        )
        return fetcher.expect(f"{YUM}/{href}", primary if primary is not None else (repo / href).read_bytes())

    def test_signed_yum_repo_loads_and_resolves_the_train(
        self, repo: Path, test_key: TestKey, trusting: Keyring
    ) -> None:
        fetcher = self.fetcher_for(repo, test_key)
        snapshot = load_yum_repo(fetcher, YUM, trusting)
        fetcher.assert_all_used()
        assert snapshot.format is PackageFormat.RPM
        assert len(snapshot.packages) == 12
        assert snapshot.fingerprint == test_key.fingerprint and snapshot.signed_at is not None
        assert [m.path.split("-")[-1] if "primary" in m.path else m.path for m in snapshot.metadata] == [
            "repodata/repomd.xml",
            "repodata/repomd.xml.asc",
            "primary.xml.gz",
        ]
        result = resolve(snapshot.packages, VersionSelector.parse("1.17.8"), PackageFormat.RPM)
        assert {p.name: p.version for p in result.packages} == {
            "libnvidia-container1": "1.17.8-1",
            "libnvidia-container-tools": "1.17.8-1",
            "nvidia-container-toolkit-base": "1.17.8-1",
            "nvidia-container-toolkit": "1.17.8-1",
        }
        assert {str(r) for r in result.node_requirements} == {"/bin/sh", "(glibc or musl)", "glibc (>= 2.17)"}
        assert snapshot.package_url(result.packages[0]) == f"{YUM}/libnvidia-container1-1.17.8-1.x86_64.rpm"

    def test_tampered_primary_is_refused(self, repo: Path, test_key: TestKey, trusting: Keyring) -> None:
        href = parse_repomd((repo / "repodata/repomd.xml").read_bytes()).data["primary"].href
        original = (repo / href).read_bytes()
        fetcher = self.fetcher_for(repo, test_key, primary=original[:-1] + bytes([original[-1] ^ 1]))
        with pytest.raises(ChecksumMismatch, match=r"primary\.xml\.gz does not match its signed checksum"):
            load_yum_repo(fetcher, YUM, trusting)

    def test_primary_whose_uncompressed_xml_is_not_the_signed_open_checksum_is_refused(
        self, repo: Path, test_key: TestKey, trusting: Keyring
    ) -> None:
        # The compressed file matches its (re-signed) checksum and size; only the XML inside differs
        # from what <open-checksum> names, so nothing but that check can catch it.
        repomd = (repo / "repodata/repomd.xml").read_text()
        entry = parse_repomd(repomd.encode()).data["primary"]
        assert entry.open_checksum_type == "sha512" and entry.open_checksum is not None
        xml = gzip.decompress((repo / entry.href).read_bytes())
        altered = xml.replace(b"<metadata ", b"<!-- not the signed XML -->\n<metadata ", 1)
        assert altered != xml
        blob = gzip.compress(altered, mtime=0)
        digest = hashlib.sha512(blob).hexdigest()
        repomd = repomd.replace(entry.checksum, digest).replace(
            f"<size>{entry.size}</size>", f"<size>{len(blob)}</size>"
        )
        href = parse_repomd(repomd.encode()).data["primary"].href
        fetcher = (
            FakeFetcher()
            .expect(f"{YUM}/repodata/repomd.xml", repomd.encode())
            .expect(f"{YUM}/repodata/repomd.xml.asc", test_key.sign_detached(repomd.encode()))
            .expect(f"{YUM}/{href}", blob)
        )
        with pytest.raises(ChecksumMismatch) as refused:
            load_yum_repo(fetcher, YUM, trusting)
        assert str(refused.value) == (
            f"{YUM}/{href} (uncompressed) does not match its signed checksum "
            f"(expected {entry.open_checksum[:16]}…, got {hashlib.sha512(altered).hexdigest()[:16]}…)"
        )
        assert refused.value.exit_code == ExitCode.VERIFICATION_FAILED

    def test_repomd_signed_by_another_key_is_refused(
        self, repo: Path, other_key: TestKey, trusting: Keyring
    ) -> None:
        fetcher = self.fetcher_for(repo, other_key)
        with pytest.raises(SignatureError, match="not in the trusted keyring"):
            load_yum_repo(fetcher, YUM, trusting)
        assert not any("primary" in url for url in fetcher.requested)


class TestFakeFetcher:
    def test_unexpected_url_fails_loudly(self) -> None:
        with pytest.raises(AssertionError, match="unexpected request for http://x/y"):
            FakeFetcher().get("http://x/y")

    def test_assert_all_used_names_unrequested_urls(self) -> None:
        fetcher = FakeFetcher().expect("http://x/a", b"a").expect("http://x/b", b"b")
        fetcher.get("http://x/a")
        with pytest.raises(AssertionError, match="never requested: http://x/b"):
            fetcher.assert_all_used()


@pytest.mark.parametrize(
    ("arch", "fmt", "expected"),
    [
        ("amd64", PackageFormat.DEB, "amd64"),
        ("x86_64", PackageFormat.DEB, "amd64"),
        ("amd64", PackageFormat.RPM, "x86_64"),
        ("arm64", PackageFormat.RPM, "aarch64"),
        ("aarch64", PackageFormat.DEB, "arm64"),
        ("ppc64le", PackageFormat.DEB, "ppc64el"),
        ("ppc64el", PackageFormat.RPM, "ppc64le"),
        ("sbsa", PackageFormat.DEB, "arm64"),
        ("sbsa", PackageFormat.RPM, "aarch64"),
    ],
)
def test_arch_spellings_are_mapped(arch: str, fmt: PackageFormat, expected: str) -> None:
    assert normalize_arch(arch, fmt) == expected


def test_repo_urls_and_bad_channel_or_arch() -> None:
    assert repo_path("stable", PackageFormat.DEB, "x86_64") == "stable/deb/amd64"
    assert repo_url("https://h/libnvidia-container/", "experimental", PackageFormat.RPM, "arm64") == (
        "https://h/libnvidia-container/experimental/rpm/aarch64"
    )
    with pytest.raises(UsageError, match="unknown channel 'nightly'"):
        repo_path("nightly", PackageFormat.DEB, "amd64")
    with pytest.raises(UsageError, match="unknown architecture 'i386'"):
        known_arch("i386")
    with pytest.raises(UsageError, match="unknown architecture 'i386'"):
        repo_path("stable", PackageFormat.DEB, "i386")


@pytest.mark.parametrize(
    "bad", ["../pool/x.deb", "/etc/passwd", "./a/../../x.deb", "a\\b.deb", "", ".", "x.deb?y=1"]
)
def test_metadata_paths_that_escape_the_repo_are_refused(bad: str) -> None:
    with pytest.raises(UnsafePathError):
        clean_relative(bad, BASE)


def test_clean_relative_normalises_flat_repo_names() -> None:
    assert (
        clean_relative("./nvidia-container-toolkit_1.17.8-1_amd64.deb", BASE)
        == "nvidia-container-toolkit_1.17.8-1_amd64.deb"
    )
    assert clean_relative("repodata/x-primary.xml.gz", BASE) == "repodata/x-primary.xml.gz"
