"""``mirror publish`` safety and ``--preserve-upstream``: what it refuses, what a failure leaves, how it swaps.

A damaged mirror, a foreign ``--out`` or a filtered mirror under ``--preserve-upstream`` each end
with one sentence and leave ``--out`` byte for byte as it was. ``full_mirror`` is a real
``mirror sync --version all``: every package upstream's signed indexes name, so upstream's
signatures can be kept.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.disk import store
from mirror.disk.trust import default_keyring_path
from mirror.publish import swap as publish_swap
from mirror.publish.files import Site, render_list, render_repo
from mirror.publish.swap import MARKER
from plumbing.errors import BusyError
from tests.cli_runner import run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.pkg_clients import apt, dnf_with_repo, new_apt_sandbox
from tests.test_publish import KEYRING, download_pinned, publish, tree_digest
from tests.upstream import UpstreamServer, UpstreamTree

URL = "http://mirror.internal/nvct"


@pytest.fixture
def deb_copy(deb_mirror: Path, tmp_path: Path) -> Path:
    """A private copy of the deb mirror (real copies, so it can be damaged)."""
    return Path(shutil.copytree(deb_mirror, tmp_path / "mirror"))


# -- a failed publish leaves the previous tree -----------------------------------------------------


def test_a_corrupted_mirror_package_aborts_and_leaves_the_previous_tree_untouched(
    deb_copy: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert publish(deb_copy, out, URL, key=operator_key).exit_code == 0
    before = tree_digest(out)
    victim = deb_copy / "stable/deb/amd64/libnvidia-container1_1.17.8-1_amd64.deb"
    damaged = bytearray(victim.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    replacement = victim.with_name(
        "replacement"
    )  # replaced by rename, as sync does: the published link keeps its bytes
    replacement.write_bytes(bytes(damaged))
    replacement.replace(victim)
    result = publish(deb_copy, out, URL, key=operator_key)
    assert result.exit_code == 3, result.stderr
    assert (
        "stable/deb/amd64/libnvidia-container1_1.17.8-1_amd64.deb in the mirror no longer matches its recorded checksum"
        in result.stderr
    )
    assert result.stderr.count("\n") == 1 and "nothing was published" in result.stderr
    assert tree_digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".out.publish-lock",
        "mirror",
        "out",
    ]  # no half-built tree


def test_a_missing_mirror_file_aborts_before_the_swap(
    deb_copy: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    (deb_copy / "stable/deb/amd64/nvidia-container-toolkit_1.17.8-1_amd64.deb").unlink()
    result = publish(deb_copy, tmp_path / "out", URL, key=operator_key)
    assert result.exit_code == 1 and "is missing from the mirror" in result.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.new-*"))


@pytest.fixture
def other_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory on another filesystem than the test's tmp_path: tmpfs (/dev/shm) or, where
    the session's temporary files are on it already (tests/ramtemp.py), the disk's /var/tmp."""
    here = tmp_path.stat().st_dev
    where = next(d for d in ("/dev/shm", "/var/tmp") if os.stat(d).st_dev != here)
    path = Path(tempfile.mkdtemp(dir=where))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_across_filesystems_files_are_copied_and_checked_while_copying(
    deb_copy: Path, operator_key: TestKey, other_filesystem: Path
) -> None:
    out = other_filesystem / "out"
    assert other_filesystem.stat().st_dev != deb_copy.stat().st_dev
    result = publish(deb_copy, out, URL, "--json", key=operator_key)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["linked"] == 0
    deb = "stable/deb/amd64/nvidia-container-toolkit_1.17.8-1_amd64.deb"
    assert (out / deb).read_bytes() == (deb_copy / deb).read_bytes()
    before = tree_digest(out)
    damaged = bytearray((deb_copy / deb).read_bytes())
    damaged[-1] ^= 0x01
    (deb_copy / deb).write_bytes(bytes(damaged))  # in place is fine here: the published file is a copy
    again = publish(deb_copy, out, URL, key=operator_key)
    assert (
        again.exit_code == 3
        and f"{deb} in the mirror no longer matches its recorded checksum" in again.stderr
    )
    assert tree_digest(out) == before and not list(other_filesystem.glob(".out.new-*"))


@pytest.mark.parametrize("where", ["inside-mirror", "contains-mirror", "foreign-dir", "file"])
def test_an_out_that_is_not_ours_to_replace_is_refused_and_left_alone(
    deb_copy: Path, operator_key: TestKey, tmp_path: Path, where: str
) -> None:
    out = {
        "inside-mirror": deb_copy / "pub",
        "contains-mirror": tmp_path,
        "foreign-dir": tmp_path / "www",
        "file": tmp_path / "www.txt",
    }[where]
    if where == "foreign-dir":
        (out / "site").mkdir(parents=True)
        (out / "index.html").write_text("someone's page\n")
    if where == "file":
        out.write_text("a file\n")
    before = tree_digest(tmp_path)
    result = publish(deb_copy, out, URL, key=operator_key)
    assert result.exit_code == 2, result.stderr
    expected = {
        "inside-mirror": "is inside the mirror",
        "contains-mirror": "contains the mirror",
        "foreign-dir": "non-empty directory that no `gpu-airgap mirror publish` wrote",
        "file": "is not a directory",
    }
    assert expected[where] in result.stderr
    assert tree_digest(tmp_path) == before and not (deb_copy / "pub").exists()


def test_republishing_swaps_the_whole_tree_and_works_without_rename_exchange(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    assert publish(deb_mirror, out, URL, key=operator_key).exit_code == 0
    (tmp_path / ".out.new-crashed").mkdir()  # left by a publish that died
    first_inode = out.stat().st_ino
    assert publish(deb_mirror, out, "http://other.internal/nvct", key=operator_key).exit_code == 0
    assert out.stat().st_ino != first_inode  # a new directory took the name: nothing was edited in place
    assert (
        "http://other.internal/nvct/stable/deb"
        in (out / "stable/deb/nvidia-container-toolkit.list").read_text()
    )
    monkeypatch.setattr(publish_swap, "_renameat2", lambda: None)
    assert publish(deb_mirror, out, URL, key=operator_key).exit_code == 0
    assert f"{URL}/stable/deb" in (out / "stable/deb/nvidia-container-toolkit.list").read_text()
    # the tree it replaced is kept whole (not nested in a temp dir) for --rollback, which swaps the same way
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.previous", ".out.publish-lock", "out"]
    kept = tmp_path / ".out.previous/stable/deb/nvidia-container-toolkit.list"
    assert "http://other.internal/nvct/stable/deb" in kept.read_text()
    rollback = (
        "mirror",
        "publish",
        "--rollback",
        "--output",
        str(out),
        "--gnupghome",
        str(operator_key.home),
    )
    assert run_cli(*rollback).exit_code == 0
    assert (
        "http://other.internal/nvct/stable/deb"
        in (out / "stable/deb/nvidia-container-toolkit.list").read_text()
    )
    assert f"{URL}/stable/deb" in kept.read_text()


def test_publish_waits_for_no_sync_and_a_sync_cannot_start_under_a_publish(
    deb_mirror: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    with store.locked(deb_mirror):  # what a running sync or prune holds
        result = publish(deb_mirror, tmp_path / "out", URL, key=operator_key)
    assert result.exit_code == 8 and f"a sync or prune is changing {deb_mirror}" in result.stderr
    readers_share = (store.locked(deb_mirror, shared=True), store.locked(deb_mirror, shared=True))
    with (
        readers_share[0],
        readers_share[1],
        pytest.raises(BusyError, match="another sync is running"),
        store.locked(deb_mirror),
    ):
        pass


def test_json_output_and_usage_errors(deb_mirror: Path, operator_key: TestKey, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cases = {
        ("ftp://x",): "must be an http:// or https:// URL",
        (URL, "--keyring-name", "../etc/x"): "--keyring-name '../etc/x' must be a plain file name",
        (URL, "--keyring", str(operator_key.public)): "--keyring only applies with --preserve-upstream",
    }
    for (base_url, *extra), message in cases.items():
        result = publish(deb_mirror, out, base_url, *extra, key=operator_key)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
    unsigned = publish(deb_mirror, out, URL)
    assert unsigned.exit_code == 2 and "name the operator key with --sign-key" in unsigned.stderr
    assert not out.exists()
    done = publish(deb_mirror, out, URL, "--json", "--keyring-name", "gpu-ops", key=operator_key)
    report = json.loads(done.stdout)
    debs = sum(p.size for p in store.MirrorState.load(deb_mirror).repos[0].packages)
    assert report["repos"] == [
        {
            "key": "stable/deb/amd64",
            "format": "deb",
            "arch": "amd64",
            "channel": "stable",
            "packages": 4,
            "bytes": debs,
            "signed_by": operator_key.fingerprint,
            "preserved": False,
        }
    ]
    published = [
        p for p in out.rglob("*") if p.is_file() and p.name != MARKER
    ]  # the marker records the totals
    assert report["files"] == len(published) and report["bytes"] == sum(p.stat().st_size for p in published)
    assert (
        "signed-by=/usr/share/keyrings/gpu-ops.gpg"
        in (out / "stable/deb/nvidia-container-toolkit.list").read_text()
    )
    assert not (out / "stable/rpm").exists()


# -- the text files ---------------------------------------------------------------------------------


def test_list_and_repo_follow_nvidias_shapes_for_the_channels_held() -> None:
    both = Site(
        "https://repo.example/nvct",
        "nvidia-container-toolkit-keyring",
        ("stable", "experimental"),
        ("stable", "experimental"),
    )
    assert render_list(both, "stable") == (
        f"deb [signed-by={KEYRING}] https://repo.example/nvct/stable/deb/$(ARCH) /\n"
        f"#deb [signed-by={KEYRING}] https://repo.example/nvct/experimental/deb/$(ARCH) /\n"
    )
    assert (
        render_list(both, "experimental")
        == f"deb [signed-by={KEYRING}] https://repo.example/nvct/experimental/deb/$(ARCH) /\n"
    )
    stable = render_repo(both, "stable")
    assert stable.count("sslverify=1\nsslcacert=/etc/pki/tls/certs/ca-bundle.crt\n") == 2  # https: verify TLS
    assert "[nvidia-container-toolkit-experimental]" in stable and "enabled=0" in stable
    experimental = render_repo(both, "experimental")
    assert experimental.count("enabled=1") == 2 and "[libnvidia-container-experimental]" in experimental


# -- --preserve-upstream -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_mirror(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """Every package of upstream's stable deb/amd64 and rpm/x86_64, by a real ``mirror sync --version all``."""
    server, dest = _upstream_session_server, tmp_path_factory.mktemp("full") / "mirror"
    result = run_mirror_sync(
        dest, server.url, upstream_tree.public_key, "--quiet", version="all", fmt=None, arch=None
    )
    assert result.exit_code == 0, result.stderr
    return dest


def test_preserve_upstream_republishes_upstreams_signed_indexes_byte_for_byte(
    full_mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path, operator_key: TestKey
) -> None:
    web = tmp_path / "web"
    with UpstreamServer(web) as server:
        result = publish(
            full_mirror,
            web / "nvct",
            f"{server.url}/nvct",
            "--preserve-upstream",
            "--keyring",
            str(upstream_tree.public_key),
            "--sign-key",
            operator_key.fingerprint,
            "--json",
        )
        assert result.exit_code == 0, result.stderr
        assert "--sign-key is not used" in result.stderr
        out = web / "nvct"
        report = json.loads(result.stdout)
        assert report["preserved_upstream"] and report["signer"] == upstream_tree.key_fingerprint
        assert all(
            r["preserved"] and r["signed_by"] == upstream_tree.key_fingerprint for r in report["repos"]
        )
        for rel in (
            "stable/deb/amd64/InRelease",
            "stable/deb/amd64/Packages.xz",
            "stable/deb/amd64/Packages",
            "stable/rpm/x86_64/repodata/repomd.xml",
            "stable/rpm/x86_64/repodata/repomd.xml.asc",
        ):
            assert (out / rel).read_bytes() == (upstream_tree.root / rel).read_bytes(), rel
        upstream_files = {
            p.relative_to(upstream_tree.root).as_posix()
            for p in upstream_tree.deb_repo("stable", "amd64").iterdir()
        }
        assert {f"stable/deb/amd64/{p.name}" for p in (out / "stable/deb/amd64").iterdir()} == upstream_files
        assert b"PUBLIC KEY" in (out / "gpgkey").read_bytes()
        assert "NVIDIA's key, as the mirror verified it" in (out / "INSTALL.md").read_text()

        sandbox = tmp_path / "apt"
        keyring = sandbox / "nvidia-container-toolkit-keyring.gpg"
        listing = (
            (out / "stable/deb/nvidia-container-toolkit.list").read_text().replace(KEYRING, str(keyring))
        )
        new_apt_sandbox(sandbox, (out / "gpgkey").read_bytes(), listing, keyring_name=keyring.name)
        update = apt(sandbox, "update")
        assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, (
            update.stdout + update.stderr
        )
        assert download_pinned(sandbox).returncode == 0
        made = dnf_with_repo(
            tmp_path / "dnf", (out / "stable/rpm/nvidia-container-toolkit.repo").read_text(), "makecache"
        )
        assert made.returncode == 0, made.stderr


def test_a_rollback_of_upstreams_signed_indexes_needs_no_key_and_warns_when_apt_would_keep_newer_ones(
    full_mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    for _ in range(2):
        assert (
            publish(
                full_mirror, out, URL, "--preserve-upstream", "--keyring", str(upstream_tree.public_key)
            ).exit_code
            == 0
        )
    rollback = ("mirror", "publish", "--rollback", "--output", str(out))
    same = run_cli(*rollback)  # the same upstream InRelease on both sides: apt takes it
    assert same.exit_code == 0 and same.stderr == "", same.stderr
    kept = publish_swap.previous(out) / "stable/deb/amd64/InRelease"
    kept.unlink()  # as if upstream had signed a newer InRelease between the two publishes
    kept.write_bytes((out / "stable/deb/amd64/InRelease").read_bytes() + b"\n")
    changed = run_cli(*rollback)
    assert changed.exit_code == 0
    assert "carry upstream's signatures, which cannot be dated again" in changed.stderr


def test_preserve_upstream_refuses_a_filtered_mirror_naming_the_repo(
    synced_mirror: Path, upstream_tree: UpstreamTree, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = publish(
        synced_mirror, out, URL, "--preserve-upstream", "--keyring", str(upstream_tree.public_key)
    )
    assert result.exit_code == 2
    assert (
        "--preserve-upstream cannot keep upstream's signatures for stable/deb/amd64: the mirror is filtered"
        in result.stderr
    )
    assert not out.exists()
    recorded = publish(synced_mirror, out, URL, "--preserve-upstream")  # the key the mirror recorded at sync
    assert recorded.exit_code == 2 and "the mirror is filtered" in recorded.stderr
    pinned = publish(
        synced_mirror, out, URL, "--preserve-upstream", "--keyring", str(default_keyring_path())
    )  # NVIDIA's real key did not sign the local upstream
    assert (
        pinned.exit_code == 3
        and "which the keyring does not hold; pass that key with --keyring" in pinned.stderr
    )


def test_a_mirror_holding_both_channels_publishes_both_with_nvidias_list_files(
    deb_copy: Path,
    upstream_tree: UpstreamTree,
    upstream_server: UpstreamServer,
    operator_key: TestKey,
    tmp_path: Path,
) -> None:
    synced = run_mirror_sync(
        deb_copy,
        upstream_server.url,
        upstream_tree.public_key,
        "--channel",
        "experimental",
        "--quiet",
        version=None,
        arch=None,
    )
    assert synced.exit_code == 0, synced.stderr
    out = tmp_path / "out"
    result = publish(deb_copy, out, URL, "--json", key=operator_key)
    assert result.exit_code == 0, result.stderr
    assert [r["key"] for r in json.loads(result.stdout)["repos"]] == [
        "experimental/deb/amd64",
        "stable/deb/amd64",
    ]
    assert (out / "stable/deb/nvidia-container-toolkit.list").read_text().splitlines()[1] == (
        f"#deb [signed-by={KEYRING}] {URL}/experimental/deb/$(ARCH) /"
    )
    assert (
        out / "experimental/deb/nvidia-container-toolkit.list"
    ).read_text() == f"deb [signed-by={KEYRING}] {URL}/experimental/deb/$(ARCH) /\n"
    assert "Codename: experimental" in (out / "experimental/deb/amd64/InRelease").read_text()
    assert any(
        p.name.startswith("nvidia-container-toolkit_1.20.0~rc.1")
        for p in (out / "experimental/deb/amd64").iterdir()
    )
