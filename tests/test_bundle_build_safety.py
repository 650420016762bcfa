"""The one-pass bundle build stays safe: every shipped byte is checked against the digest the mirror verified.

The manifest is written from the sha256 the mirror recorded at sync time, before any package is
read; the single read that feeds the compressor re-hashes each package and aborts the build on a
mismatch. These tests tamper with a really synced mirror after the sync and expect the build to
fail naming the file, with nothing left in the output directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from installer.manifest import MANIFEST_NAME, SIGNATURE_NAME
from installer.manifest_parser import parse_manifest
from mirror.bundle.build import BuildResult, build_bundle
from mirror.bundle.tar import _Worker
from mirror.disk.store import MirrorState, write_state
from mirror.errors import PackageChangedError
from plumbing.errors import ExitCode
from tests.cli_runner import run_bundle_build, run_cli
from tests.gpgkeys import TestKey

ROOT = Path(__file__).resolve().parent.parent
EPOCH = 2_000_000_000  # a fixed SOURCE_DATE_EPOCH after any key made today (2033)


@pytest.fixture
def mirror(deb_mirror: Path, tmp_path: Path) -> Path:
    """A private copy of the synced deb/amd64 mirror, free to tamper with."""
    return Path(shutil.copytree(deb_mirror, tmp_path / "mirror"))


def _packages(mirror: Path) -> list[Path]:
    state = MirrorState.load(mirror)
    return [pkg.local_path(mirror) for repo in state.repos for pkg in repo.packages]


def _build(mirror: Path, key: TestKey, output: Path, compression: str = "zstd", **kwargs: Any) -> BuildResult:
    return build_bundle(
        mirror,
        version="1.17.8",
        channel=None,
        targets=[("deb", "amd64")],
        sign_key=key.fingerprint,
        gnupghome=key.home,
        output=output,
        compression=compression,
        **kwargs,
    )


@pytest.mark.parametrize("where", ["middle", "end"])
def test_build_fails_naming_a_package_modified_after_sync_and_leaves_no_output(
    mirror: Path, operator_key: TestKey, tmp_path: Path, where: str
) -> None:
    victim = _packages(mirror)[-1]
    recorded = next(
        p.sha256 for r in MirrorState.load(mirror).repos for p in r.packages if p.path.endswith(victim.name)
    )
    data = bytearray(victim.read_bytes())
    # Same size, so only the digest can tell. In the middle the package's own control data breaks;
    # at the end only the data payload changes.
    data[len(data) // 2 if where == "middle" else -1] ^= 0x01
    victim.write_bytes(bytes(data))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(PackageChangedError) as caught:
        # An empty header cache: the package is hashed before its header is read (verify, then parse).
        _build(mirror, operator_key, out_dir / "bundle.tar.zst", info_cache=tmp_path / "info")
    assert str(victim) in str(caught.value) and "changed since the mirror verified it" in str(caught.value)
    assert caught.value.__cause__ is None  # refused on its digest, not by a parser choking on it
    assert not list((tmp_path / "info").glob(f"*{recorded}*"))  # its header was never read
    assert list(out_dir.iterdir()) == []


def test_cli_build_of_a_package_that_grew_after_sync_exits_non_zero_naming_it(
    mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    victim = _packages(mirror)[0]
    with open(victim, "ab") as fh:
        fh.write(b"\0")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    result = run_bundle_build(mirror, operator_key, out_dir / "bundle.tar.zst")
    assert result.exit_code != 0
    assert str(victim) in result.stderr
    assert list(out_dir.iterdir()) == []


def test_a_package_recorded_by_sha512_alone_ships_with_its_sha256_and_is_still_checked(
    mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    state = MirrorState.load(mirror)
    repos = tuple(
        dataclasses.replace(r, packages=tuple(dataclasses.replace(p, sha256=None) for p in r.packages))
        for r in state.repos
    )
    write_state(mirror, dataclasses.replace(state, repos=repos))
    _build(mirror, operator_key, tmp_path / "ok.tar", compression="none")
    with tarfile.open(tmp_path / "ok.tar") as tar:
        manifest_file = tar.extractfile(MANIFEST_NAME)
        assert manifest_file is not None
        manifest = parse_manifest(manifest_file.read())
    shipped = {p.file.rsplit("/", 1)[-1]: p.sha256 for t in manifest.targets for p in t.packages}
    assert shipped == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in _packages(mirror)}

    victim = _packages(mirror)[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(PackageChangedError) as caught:
        _build(mirror, operator_key, tmp_path / "bad.tar.zst")
    assert str(victim) in str(caught.value)
    assert not list(tmp_path.glob("bad.tar.zst*")) and not list(tmp_path.glob(".bad.tar.zst*"))


def test_cached_package_queries_give_the_same_bundle_and_a_tampered_file_still_fails(
    mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    cache = tmp_path / "info"
    first = _build(mirror, operator_key, tmp_path / "a.tar", "none", info_cache=cache, epoch=EPOCH)
    assert len(list(cache.glob("deb-sha256-*.json"))) == len(_packages(mirror))
    second = _build(mirror, operator_key, tmp_path / "b.tar", "none", info_cache=cache, epoch=EPOCH)
    assert _members(first.outputs[0]) == _members(second.outputs[0])

    victim = _packages(mirror)[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # would break the control data, but the cached header is used
    victim.write_bytes(bytes(data))
    with pytest.raises(PackageChangedError, match=re.escape(str(victim))):
        _build(mirror, operator_key, tmp_path / "c.tar", "none", info_cache=cache, epoch=EPOCH)
    assert not list(tmp_path.glob("*c.tar*"))


def _members(path: Path) -> dict[str, bytes]:
    """Every member's bytes but the signature's (made at the real time)."""
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.name != SIGNATURE_NAME}  # type: ignore[union-attr]


def test_an_error_on_a_worker_thread_reaches_the_producer() -> None:
    seen: list[bytes] = []

    def consume(data: bytes) -> None:
        if data == b"bad":
            raise OSError("disk full")
        seen.append(data)

    worker = _Worker(consume, "test-worker", depth=1)
    worker.put(b"good")
    worker.put(b"bad")
    with pytest.raises(OSError, match="disk full"):
        for _ in range(100):  # the error surfaces on a later put, or at the latest on close
            worker.put(b"after")
        worker.close()
    with pytest.raises(OSError, match="disk full"):
        worker.close()  # joins the thread and still reports the error
    assert seen == [b"good"]
    assert "test-worker" not in {t.name for t in threading.enumerate()}


def test_bundle_build_command_line_does_not_import_the_mirror_sync_stack() -> None:
    code = "import sys, mirror.cli; print(sorted(m for m in ('requests', 'mirror.sync.core', 'mirror.sync.http') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"


def test_the_cli_default_upstream_is_the_sync_default() -> None:
    from mirror.sync import cli
    from mirror.sync import core as sync

    assert cli.DEFAULT_UPSTREAM == sync.DEFAULT_UPSTREAM


def test_a_passphrase_protected_key_says_how_to_unlock_it_and_leaves_no_output(
    deb_mirror: Path, tmp_path: Path
) -> None:
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback"]
    subprocess.run(
        [
            *gpg,
            "--passphrase",
            "secret",
            "--quick-gen-key",
            "ops <ops@example.invalid>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    try:
        out = tmp_path / "out"
        out.mkdir()
        built = run_cli(
            "bundle",
            "build",
            "--mirror",
            str(deb_mirror),
            "--target",
            "deb/amd64",
            "--sign-key",
            "ops@example.invalid",
            "--gnupghome",
            str(home),
            "--output",
            str(out / "b.tar.zst"),
        )
        listed = subprocess.run(
            [*gpg, "--with-colons", "--list-secret-keys"], check=True, capture_output=True
        )
        fpr = next(
            line.split(":")[9] for line in listed.stdout.decode().splitlines() if line.startswith("fpr:")
        )
        # a locked key is not a verification failure (exit 3): the key given cannot be used, exit 2 (#25.9)
        assert built.exit_code == ExitCode.USAGE
        (line,) = built.stderr.strip().splitlines()
        assert line == (
            f"gpu-airgap: error: the signing key {fpr} is protected by a passphrase, which gpg cannot ask for in "
            f"batch mode; unlock it once in a terminal (export GPG_TTY=$(tty); gpg --homedir {home} -u {fpr} "
            "--clearsign < /dev/null > /dev/null), then run again"
        )
        assert list(out.iterdir()) == []
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
