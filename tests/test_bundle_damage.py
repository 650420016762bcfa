"""Damaged and padded bundles on the connected host: one sentence and exit 3, never a traceback, never a blind read.

- A zstd bundle with a flipped byte, or a split one with its parts swapped, reads as "damaged or
  truncated" on the host (the zstandard module) exactly as on a node (the ``zstd`` command).
- ``bundle verify`` stops at the header of a member the signed manifest does not list, or lists
  with another size, instead of reading (decompressing) all of it: measured in bytes read.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.cli_runner import CliResult, run_bundle_build, run_cli
from tests.gpgkeys import TestKey

PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")
DAMAGED = "the archive is damaged or truncated after this member"


def _flipped(source: Path, target: Path, offset: int) -> Path:
    data = bytearray(source.read_bytes())
    data[offset] ^= 0x55
    target.write_bytes(bytes(data))
    return target


def _one_sentence(result: CliResult) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def node_tool(deb_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle's own node zipapp, to run on python3.9 -I (no zstandard: it uses the zstd command)."""
    out = tmp_path_factory.mktemp("node-tool")
    subprocess.run(["tar", "-xf", str(deb_bundle), "-C", str(out), "gpu-airgap-node.pyz"], check=True)
    return out / "gpu-airgap-node.pyz"


@pytest.mark.parametrize("where", [0.5, 0.9, -40], ids=["middle", "late", "last-bytes"])
def test_a_flipped_byte_in_a_zstd_bundle_reads_as_damaged_on_the_host_as_on_a_node(
    deb_bundle: Path, operator_key: TestKey, node_tool: Path, tmp_path: Path, where: float
) -> None:
    size = deb_bundle.stat().st_size
    bundle = _flipped(
        deb_bundle, tmp_path / "damaged.tar.zst", int(size * where) if where > 0 else size + int(where)
    )

    host = run_cli("bundle", "verify", str(bundle), "--keyring", str(operator_key.public))
    assert host.exit_code == 3
    assert DAMAGED in _one_sentence(host)
    node = subprocess.run(
        [
            str(PY39),
            "-I",
            str(node_tool),
            "bundle",
            "verify",
            str(bundle),
            "--keyring",
            str(operator_key.public),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert node.returncode == 3 and DAMAGED in node.stderr
    # inspect reads only the manifest at the start, on both sides: the damage further on is verify's to find.
    inspected = run_cli("bundle", "inspect", str(bundle))
    assert inspected.exit_code == 0, inspected.stderr
    assert "NVIDIA Container Toolkit 1.17.8" in inspected.stdout


def test_a_zstd_bundle_damaged_at_its_start_cannot_be_inspected_and_says_so(
    deb_bundle: Path, tmp_path: Path
) -> None:
    bundle = _flipped(deb_bundle, tmp_path / "damaged.tar.zst", 6)  # the frame header
    result = run_cli("bundle", "inspect", str(bundle))
    assert result.exit_code == 3
    assert DAMAGED in _one_sentence(result)


@pytest.mark.slow
@pytest.mark.parametrize("swap", [("002", "003"), ("001", "002"), ("003", "004")])
def test_swapped_parts_of_a_split_zstd_bundle_are_one_sentence_and_exit_3(
    split_bundle: Path, operator_key: TestKey, tmp_path: Path, swap: tuple[str, str]
) -> None:
    parts = tmp_path / "parts"
    shutil.copytree(split_bundle, parts)
    first = parts / "nvct.tar.zst.part001"
    assert run_cli("bundle", "verify", str(first), "--keyring", str(operator_key.public)).exit_code == 0
    a, b = (parts / f"nvct.tar.zst.part{n}" for n in swap)
    a.rename(parts / "swap")
    b.rename(a)
    (parts / "swap").rename(b)

    verified = run_cli("bundle", "verify", str(first), "--keyring", str(operator_key.public))
    assert verified.exit_code == 3
    sentence = _one_sentence(verified)
    assert DAMAGED in sentence or f"part nvct.tar.zst.part{swap[0]} does not match" in sentence
    inspected = run_cli("bundle", "inspect", str(first))
    assert inspected.exit_code in (0, 3)
    if inspected.exit_code:
        _one_sentence(inspected)


# -- members the manifest does not vouch for ------------------------------------------------------


def _plain_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | int]]) -> Path:
    """Write a GNU tar; a member given an int gets that many bytes of hole (a sparse file, nothing written)."""
    with open(path, "wb") as out:
        for info, data in members:
            info.size = data if isinstance(data, int) else len(data)
            out.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict"))
            if isinstance(data, int):
                out.seek(data, 1)
            else:
                out.write(data)
            out.seek(-info.size % tarfile.BLOCKSIZE, 1)
        out.write(tarfile.NUL * 2 * tarfile.BLOCKSIZE)
        out.truncate()
    return path


def _bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.fixture(scope="module")
def plain_members(
    deb_mirror: Path, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[tarfile.TarInfo, bytes]]:
    """The members of an uncompressed deb bundle built by ``bundle build``, in order."""
    out = tmp_path_factory.mktemp("plain-bundle") / "b.tar"
    built = run_bundle_build(deb_mirror, operator_key, out, "--compression", "none")
    assert built.exit_code == 0, built.stderr
    with tarfile.open(out) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


HUGE = 1 << 30


@pytest.mark.parametrize("case", ["unlisted", "larger-than-listed"])
def test_verify_stops_at_the_header_of_a_member_the_manifest_does_not_vouch_for(
    plain_members: list[tuple[tarfile.TarInfo, bytes]], operator_key: TestKey, tmp_path: Path, case: str
) -> None:
    members: list[tuple[tarfile.TarInfo, bytes | int]] = list(plain_members)
    if case == "unlisted":
        name = "targets/deb-amd64/extra_1.0_amd64.deb"
        members.insert(2, (tarfile.TarInfo(name), HUGE))
    else:
        name = "gpu-airgap-node.pyz"
        index = next(i for i, (m, _) in enumerate(members) if m.name == name)
        members[index] = (members[index][0], HUGE)
    bundle = _plain_tar(tmp_path / "padded.tar", members)
    assert (
        bundle.stat().st_size > HUGE and bundle.stat().st_blocks * 512 < 64 << 20
    )  # a 1 GiB hole, little on disk

    before = _bytes_read()
    result = run_cli("bundle", "verify", str(bundle), "--keyring", str(operator_key.public))
    read = _bytes_read() - before
    assert read < 32 << 20, f"verify read {read} bytes of a bundle whose bad member holds {HUGE}"
    assert result.exit_code == 3
    assert f"failed verification at {name}: " in _one_sentence(result)
    assert "stopped before reading it" in result.stderr
