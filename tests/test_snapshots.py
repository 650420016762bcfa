"""``mirror snapshot`` and promotion: frozen mirrors (hard links) that later syncs and prunes never change,
bundles and published trees built from them, and ``mirror publish --rollback`` as the undo of a promotion.

Every mirror here is a real ``mirror sync`` from the loopback upstream; published trees are read by
sandboxed apt-get as in tests/test_publish.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from mirror.disk import snapshot, store
from mirror.publish.swap import MARKER, previous
from tests.cli_runner import CliResult, run_bundle_build, run_cli
from tests.gpgkeys import TestKey
from tests.pkg_clients import apt, dnf_with_repo
from tests.test_full_disk import SmallDisk, small_disk  # noqa: F401 - small_disk is a fixture
from tests.test_mirror_sync import _sync as sync_cli
from tests.test_publish import apt_for, publish, site  # noqa: F401 - site is a fixture
from tests.upstream import UpstreamServer, UpstreamTree

DEB = "stable/deb/amd64"


def _sync(server: UpstreamServer, tree: UpstreamTree, dest: Path, version: str, formats: str = "deb") -> None:
    args = ("--version", version, "--format", formats, "--arch", "amd64", "--quiet")
    result = sync_cli(server, tree, dest, *args)
    assert result.exit_code == 0, result.stderr


def _snap(*args: str) -> CliResult:
    return run_cli("mirror", "snapshot", *args)


def _download(sandbox: Path, version: str) -> subprocess.CompletedProcess[str]:
    into = tempfile.mkdtemp(dir=sandbox)  # apt-get download skips a file the directory already has
    return apt(sandbox, "download", f"nvidia-container-toolkit={version}", cwd=Path(into))


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file of a snapshot's repo directories with its inode and bytes."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.read_bytes())
        for p in sorted((root / "stable").rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def mirror(upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path) -> Path:
    """A mirror of 1.17.8 (deb/amd64) with snapshot ``test1`` of it."""
    dest = tmp_path / "mirror"
    _sync(upstream_server, upstream_tree, dest, "1.17.8")
    created = _snap("create", "test1", "--mirror", str(dest))
    assert created.exit_code == 0, created.stderr
    assert "created snapshot test1: stable/deb/amd64 1.17.8-1" in created.stdout
    return dest


def test_a_snapshot_is_hard_links_that_a_later_sync_and_prune_leave_unchanged(
    mirror: Path, upstream_tree: UpstreamTree, upstream_server: UpstreamServer
) -> None:
    frozen = snapshot.root(mirror) / "test1"
    before = _files(frozen)
    deb = f"{DEB}/nvidia-container-toolkit_1.17.8-1_amd64.deb"
    assert before[deb][0] == (mirror / deb).stat().st_ino  # a link of the mirror's file, not a copy
    assert f"{DEB}/InRelease" in before  # the signed index is frozen with the packages
    _sync(upstream_server, upstream_tree, mirror, "1.18.0")
    pruned = run_cli("mirror", "prune", "--mirror", str(mirror), "--keep", "1")
    assert pruned.exit_code == 0, pruned.stderr
    assert not (mirror / deb).exists()  # the mirror let 1.17.8 go ...
    assert _files(frozen) == before  # ... the snapshot still holds the same inodes and bytes
    verified = run_cli("mirror", "verify", "--mirror", str(frozen))
    assert verified.exit_code == 0, verified.stdout + verified.stderr

    listed = json.loads(_snap("list", "--mirror", str(mirror), "--json").stdout)["snapshots"]
    assert [(s["name"], s["releases"]) for s in listed] == [("test1", {DEB: ["1.17.8-1"]})]
    assert listed[0]["unique_bytes"] > 0  # the pruned packages live on in the snapshot alone

    diff = _snap("diff", "test1", "current", "--mirror", str(mirror), "--json")
    assert diff.exit_code == 0, diff.stderr
    (repo,) = json.loads(diff.stdout)["repos"]
    assert (repo["key"], repo["releases_added"], repo["releases_removed"]) == (
        DEB,
        ["1.18.0-1"],
        ["1.17.8-1"],
    )
    assert "nvidia-container-toolkit_1.18.0-1_amd64.deb" in repo["packages_added"]
    text = _snap("diff", "test1", "current", "--mirror", str(mirror)).stdout
    assert f"{DEB}: + release 1.18.0-1" in text and f"{DEB}: - release 1.17.8-1" in text


def test_a_repairing_sync_puts_a_new_file_in_the_mirror_and_leaves_the_snapshots_alone(
    mirror: Path, upstream_tree: UpstreamTree, upstream_server: UpstreamServer
) -> None:
    frozen = snapshot.root(mirror) / "test1"
    before = _files(frozen)
    deb = f"{DEB}/nvidia-container-toolkit_1.17.8-1_amd64.deb"
    (mirror / deb).unlink()  # damage that `mirror verify` reports and a sync repairs
    _sync(upstream_server, upstream_tree, mirror, "1.17.8")
    assert (mirror / deb).read_bytes() == before[deb][1]
    assert (mirror / deb).stat().st_ino != before[deb][0]  # repaired as a new file ...
    assert _files(frozen) == before  # ... beside the snapshot's untouched one


def test_dnf_reads_a_published_snapshot_of_a_yum_repo(
    upstream_tree: UpstreamTree,
    upstream_server: UpstreamServer,
    operator_key: TestKey,
    site: UpstreamServer,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    dest = tmp_path / "mirror"
    _sync(upstream_server, upstream_tree, dest, "1.17.8", "rpm")
    assert _snap("create", "rpm-test", "--mirror", str(dest)).exit_code == 0
    _sync(upstream_server, upstream_tree, dest, "1.18.0", "rpm")
    out = site.root / "rpm-prod"
    published = publish(dest, out, f"{site.url}/rpm-prod", "--snapshot", "rpm-test", key=operator_key)
    assert published.exit_code == 0, published.stderr
    repo = (out / "stable/rpm/nvidia-container-toolkit.repo").read_text()
    assert dnf_with_repo(tmp_path / "dnf", repo, "makecache").returncode == 0
    query = dnf_with_repo(
        tmp_path / "dnf", repo, "repoquery", "--available", "--repo", "nvidia-container-toolkit"
    )
    assert query.returncode == 0, query.stderr
    versions = {line.rsplit(":", 1)[-1] for line in query.stdout.split()}
    assert versions == {"1.17.8-1.x86_64"}  # the snapshot's release, not the mirror's newer one


def test_bundle_build_from_a_snapshot_ships_its_release_and_verifies(
    mirror: Path,
    upstream_tree: UpstreamTree,
    upstream_server: UpstreamServer,
    operator_key: TestKey,
    tmp_path: Path,
) -> None:
    _sync(upstream_server, upstream_tree, mirror, "1.18.0")
    out = tmp_path / "b.tar"
    built = run_bundle_build(mirror, operator_key, out, "--snapshot", "test1", "--json", version=None)
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["toolkit_version"] == "1.17.8"  # the live mirror's latest is 1.18.0
    verified = run_cli("bundle", "verify", str(out), "--keyring", str(operator_key.public))
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    missing = run_bundle_build(mirror, operator_key, tmp_path / "c", "--snapshot", "nope", version=None)
    assert missing.exit_code == 2 and "has no snapshot 'nope' (it has: test1)" in missing.stderr


def test_promotion_publishes_a_snapshot_apt_reads_and_rollback_undoes_it_atomically(
    mirror: Path,
    upstream_tree: UpstreamTree,
    upstream_server: UpstreamServer,
    past_key: TestKey,
    site: UpstreamServer,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _sync(upstream_server, upstream_tree, mirror, "1.18.0")
    assert _snap("create", "test2", "--mirror", str(mirror)).exit_code == 0
    out = site.root / "prod"
    url = f"{site.url}/prod"
    # test1 is dated a day before test2: apt keeps test2's indexes unless the rollback dates test1's again
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(time.time()) - 86400))
    first = publish(mirror, out, url, "--snapshot", "test1", key=past_key)
    assert first.exit_code == 0 and "from snapshot test1" in first.stdout, first.stderr
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    second = publish(mirror, out, url, "--snapshot", "test2", "--json", key=past_key)
    assert second.exit_code == 0 and json.loads(second.stdout)["snapshot"] == "test2", second.stderr
    assert "1.18.0-1" in (out / DEB / "Packages").read_text()
    promoted = (out / DEB / "Packages").read_bytes()
    roll = ("mirror", "publish", "--rollback", "--output", str(out), "--gnupghome", str(past_key.home))

    sandbox = apt_for(out, tmp_path)
    assert apt(sandbox, "update").returncode == 0
    fetched = _download(sandbox, "1.18.0-1")
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr

    refused = _snap("delete", "test1", "--mirror", str(mirror))
    assert (
        refused.exit_code == 2
        and f"snapshot 'test1' is published at {out} (its --rollback target)" in refused.stderr
    )

    seen: set[str] = set()
    problems: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.add(json.loads((out / MARKER).read_text())["snapshot"])
            except OSError as exc:
                problems.append(str(exc))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(10):
            assert run_cli(*roll).exit_code == 0
    finally:
        stop.set()
        reader.join()
    assert problems == [] and seen == {"test1", "test2"}  # always one whole tree, never none

    back = run_cli(*roll, "--json")
    assert back.exit_code == 0, back.stderr
    assert json.loads(back.stdout) == {
        "ok": True,
        "output": str(out),
        "serving": "test1",
        "replaced": "test2",
    }
    assert "1.18.0-1" not in (out / DEB / "Packages").read_text()
    assert apt(sandbox, "update").returncode == 0
    assert (
        "Version '1.18.0-1' for 'nvidia-container-toolkit' was not found"
        in _download(sandbox, "1.18.0-1").stderr
    )
    assert _download(sandbox, "1.17.8-1").returncode == 0

    undo = run_cli(*roll)
    assert undo.exit_code == 0 and "serves snapshot test2 again (was snapshot test1)" in undo.stdout
    assert (out / DEB / "Packages").read_bytes() == promoted  # the very index (its InRelease is dated anew)
    refused = _snap("delete", "test2", "--mirror", str(mirror))
    assert refused.exit_code == 2 and f"snapshot 'test2' is published at {out};" in refused.stderr
    forced = _snap("delete", "test1", "--mirror", str(mirror), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert snapshot.names(mirror) == ["test2"]
    assert (previous(out) / DEB / "Packages").is_file()  # a published tree holds its own links


def test_rollback_without_a_kept_tree_is_refused_naming_why(tmp_path: Path) -> None:
    result = run_cli("mirror", "publish", "--rollback", "--output", str(tmp_path / "out"))
    assert result.exit_code == 2 and "cannot roll back" in result.stderr and "is not there" in result.stderr
    mixed = run_cli("mirror", "publish", "--rollback", "--output", str(tmp_path / "out"), "--snapshot", "a")
    assert mixed.exit_code == 2 and "--rollback takes only --output" in mixed.stderr


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "current", "", "x" * 65])
def test_a_snapshot_name_that_is_not_plain_is_refused(mirror: Path, name: str) -> None:
    result = _snap("create", name, "--mirror", str(mirror))
    assert result.exit_code == 2 and "is not allowed" in result.stderr, result.stderr
    assert snapshot.names(mirror) == ["test1"]


def test_a_snapshot_being_read_is_not_deleted(mirror: Path) -> None:
    with store.locked(snapshot.root(mirror) / "test1", shared=True):  # as a publish or a build holds it
        result = _snap("delete", "test1", "--mirror", str(mirror))
    assert result.exit_code == 8, result.stderr
    assert "a publish or bundle build is reading snapshot 'test1'" in result.stderr
    assert snapshot.names(mirror) == ["test1"]


def test_a_taken_name_is_refused_and_the_snapshot_kept(mirror: Path) -> None:
    result = _snap("create", "test1", "--mirror", str(mirror))
    assert result.exit_code == 2 and "already has a snapshot 'test1'" in result.stderr


@pytest.mark.parametrize("changes", [1, 2])
def test_a_create_killed_midway_leaves_no_half_snapshot_and_can_be_run_again(
    mirror: Path, changes: int
) -> None:
    argv = ["mirror", "snapshot", "create", "test2", "--mirror", str(mirror)]
    killed = subprocess.run(
        [sys.executable, "-m", "tests.kill_points", str(changes), *argv],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert killed.returncode == -9, killed.stderr
    assert list(snapshot.root(mirror).glob(".test2.new-*"))  # the kill left its temp dir ...
    assert snapshot.names(mirror) == ["test1"]  # ... which nothing lists
    listed = json.loads(_snap("list", "--mirror", str(mirror), "--json").stdout)["snapshots"]
    assert [s["name"] for s in listed] == ["test1"]
    again = _snap("create", "test2", "--mirror", str(mirror))
    assert again.exit_code == 0, again.stderr
    assert not list(snapshot.root(mirror).glob(".test2.new-*"))
    assert snapshot.names(mirror) == ["test1", "test2"]


@pytest.mark.parametrize("kind", ["pages", "inodes"])
def test_a_create_on_a_full_disk_says_so_and_leaves_no_snapshot(
    upstream_tree: UpstreamTree,
    upstream_server: UpstreamServer,
    small_disk: SmallDisk,  # noqa: F811 - the fixture imported above
    kind: str,
) -> None:
    dest = small_disk.root / "mirror"
    _sync(upstream_server, upstream_tree, dest, "1.17.8")
    assert _snap("create", "a", "--mirror", str(dest)).exit_code == 0
    small_disk.leave_free(**{kind: 1})
    result = _snap("create", "b", "--mirror", str(dest))
    small_disk.unlimit()
    assert result.exit_code == 10, result.stderr
    assert "no snapshot was made" in result.stderr
    assert snapshot.names(dest) == ["a"] and not list(snapshot.root(dest).glob(".b.*"))
    assert _snap("create", "b", "--mirror", str(dest)).exit_code == 0
