"""mirror.index.rpm on NVIDIA's real repomd.xml and on a real createrepo_c repository."""

from __future__ import annotations

import gzip
import io
import itertools
import lzma
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import zstandard

from mirror.errors import MetadataError
from mirror.index.rpm import iter_primary, parse_repomd
from mirror.model import PackageFormat, Relation
from tests.gpgkeys import REAL
from tests.rpmrepo import build_yum_repo


@pytest.fixture(scope="module")
def yum_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_yum_repo(tmp_path_factory.mktemp("yum") / "x86_64", ["1.17.8", "1.17.9"])


def primary_xml(repo: Path) -> bytes:
    href = parse_repomd((repo / "repodata/repomd.xml").read_bytes()).data["primary"].href
    return gzip.decompress((repo / href).read_bytes())


def test_real_repomd_names_primary_with_sha512_sizes_and_open_checksum() -> None:
    repomd = parse_repomd((REAL / "stable/rpm/x86_64/repodata/repomd.xml").read_bytes())
    assert set(repomd.data) == {"primary", "filelists", "other"}
    primary = repomd.data["primary"]
    assert primary.href.startswith("repodata/3864010a3f325b03") and primary.href.endswith("-primary.xml.gz")
    assert (primary.checksum_type, primary.size, primary.open_size) == ("sha512", 33847, 479675)
    assert primary.open_checksum and primary.open_checksum.startswith("2f0624ba7c6d4f85")
    assert primary.timestamp == 1789765756
    assert repomd.revision == "1.0"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<repomd", "not well-formed XML"),
        (b"<html/>", "not repomd"),
        (b'<repomd xmlns="http://linux.duke.edu/metadata/repo"/>', "names no metadata files"),
        (
            b'<repomd xmlns="http://linux.duke.edu/metadata/repo"><data type="primary"/></repomd>',
            "without location or checksum",
        ),
    ],
)
def test_malformed_repomd_is_an_error(data: bytes, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        parse_repomd(data)


def test_primary_from_createrepo_c_gives_packages_and_relations(yum_repo: Path) -> None:
    href = parse_repomd((yum_repo / "repodata/repomd.xml").read_bytes()).data["primary"].href
    with (yum_repo / href).open("rb") as stream:
        packages = {(p.name, p.version): p for p in iter_primary(stream)}
    assert len(packages) == 8
    toolkit = packages[("nvidia-container-toolkit", "1.17.8-1")]
    assert toolkit.format is PackageFormat.RPM
    assert toolkit.arch == "x86_64"
    assert toolkit.filename == "nvidia-container-toolkit-1.17.8-1.x86_64.rpm"
    assert toolkit.size == (yum_repo / toolkit.filename).stat().st_size
    assert toolkit.sha512 and len(toolkit.sha512) == 128 and toolkit.sha256 is None
    requires = {rel for group in toolkit.depends for rel in group}
    assert Relation("nvidia-container-toolkit-base", "=", "1.17.8-1") in requires
    assert Relation("libnvidia-container-tools", ">=", "1.17.8-1") in requires
    assert Relation("libnvidia-container-tools", "<<", "2.0.0") in requires
    assert Relation("/bin/sh", raw="/bin/sh") in requires  # file require kept raw
    assert Relation("(glibc or musl)", raw="(glibc or musl)") in requires  # rich dependency kept raw
    assert not any(rel.name.startswith("rpmlib(") for rel in requires)
    assert toolkit.conflicts == ((Relation("nvidia-container-runtime", "<=", "3.5.0-1"),),)
    assert toolkit.replaces == ((Relation("nvidia-container-runtime-hook"),),)
    lib = packages[("libnvidia-container1", "1.17.8-1")]
    assert Relation("libnvidia-container1(x86-64)", "=", "1.17.8-1") in lib.provides


@pytest.mark.parametrize(
    "compress",
    [gzip.compress, lzma.compress, zstandard.ZstdCompressor().compress, lambda b: b],
    ids=["gz", "xz", "zst", "plain"],
)
def test_primary_is_read_whatever_the_compression(yum_repo: Path, compress) -> None:  # type: ignore[no-untyped-def]
    assert len(list(iter_primary(io.BytesIO(compress(primary_xml(yum_repo)))))) == 8


def test_primary_parse_keeps_memory_bounded_by_clearing_finished_packages() -> None:
    # The root element must not accumulate finished packages while streaming. Measured in a fresh
    # interpreter: in a worker that ran other tests first, their threads and the garbage collector's
    # state add to tracemalloc's peak (4.18 MB was seen), which says nothing about this parser.
    done = subprocess.run(
        [sys.executable, "-c", "from tests.test_rpm_index import _primary_parse_peak; _primary_parse_peak()"],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    count, peak = map(int, done.stdout.split())
    assert count == 5000
    # ~2 MB of XML went through; keeping the parsed tree would cost ~10x that.
    assert peak < 4_000_000, f"peak {peak} bytes"


def _primary_parse_peak() -> None:
    """Print how many packages 5,000 streamed ``<package>`` elements gave and tracemalloc's peak."""
    N = 5000
    head = b'<?xml version="1.0"?><metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm">'
    one = (
        b'<package type="rpm"><name>p%d</name><arch>noarch</arch><version epoch="0" ver="1" rel="1"/>'
        b'<checksum type="sha256" pkgid="YES">'
        + b"a"
        * 64
        + b'</checksum><size package="1"/><location href="p.rpm"/>'
        b'<format><rpm:requires><rpm:entry name="rpmlib(X)"/><rpm:entry name="q" flags="GE" epoch="2" ver="1"/></rpm:requires></format></package>'
    )

    class Chunks(io.RawIOBase):
        def __init__(self) -> None:
            self.parts = itertools.chain(
                [head], (one.replace(b"%d", str(i).encode()) for i in range(N)), [b"</metadata>"]
            )
            self.pending = b""

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
            while not self.pending:
                self.pending = next(self.parts, b"")
                if not self.pending:
                    return 0
            n = min(len(buffer), len(self.pending))
            buffer[:n], self.pending = self.pending[:n], self.pending[n:]
            return n

    count = 0
    tracemalloc.start()
    try:
        for package in iter_primary(Chunks()):  # type: ignore[arg-type]
            count += 1
            assert package.depends == ((Relation("q", ">=", "2:1"),),)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(count, peak)


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (b"<metadata", "not well-formed XML"),
        (b"<repomd/>", "not metadata"),
        (
            b'<metadata xmlns="http://linux.duke.edu/metadata/common"><package type="rpm"><name>x</name></package></metadata>',
            "entry for x lacks name, version, location or checksum",
        ),
        (
            b'<metadata xmlns="http://linux.duke.edu/metadata/common"><package type="rpm"><name>x</name><version epoch="0"/>'
            b'<checksum type="sha256">ab</checksum><location href="x.rpm"/><size package="1"/></package></metadata>',
            "entry for x lacks name, version",
        ),
        (
            b'<metadata xmlns="http://linux.duke.edu/metadata/common"><package type="rpm"><name>x</name><version ver="1"/>'
            b'<checksum type="md5">ab</checksum><location href="x.rpm"/><size package="1"/></package></metadata>',
            "uses checksum type 'md5'",
        ),
    ],
)
def test_malformed_primary_is_an_error(xml: bytes, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        list(iter_primary(io.BytesIO(xml)))


def test_corrupt_compressed_primary_is_an_error() -> None:
    with pytest.raises(MetadataError, match="cannot be decompressed"):
        list(iter_primary(io.BytesIO(b"\x1f\x8b" + b"garbage" * 10)))
