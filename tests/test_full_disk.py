"""A full disk, anywhere: one sentence, exit 10 (NO_SPACE), nothing lost, and the next run completes.

Each test mounts its own small tmpfs (``size=`` and ``nr_inodes=`` limits, unmounted by a finalizer)
and runs the real commands against the local upstream. The sync tests sweep the free space (pages,
then inodes) one step at a time from none to enough, so every write of a sync - the first package
byte, the last one, each staged metadata file, the cache, ``state.json``, the journal - runs out at
least once; after each failure the mirror must be exactly as it was and ``mirror verify`` must pass.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.test_publish import publish as publish_mirror
from tests.upstream import UpstreamServer, UpstreamTree, copy_upstream, resign_inrelease

PAGE = os.sysconf("SC_PAGE_SIZE")
NO_SPACE = int(ExitCode.NO_SPACE)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")


@dataclass
class SmallDisk:
    """A tmpfs mounted at ``root``; :meth:`leave_free` remounts it with that little room to spare."""

    root: Path

    def usage(self) -> tuple[int, int]:
        """(pages, inodes) in use."""
        st = os.statvfs(self.root)
        return st.f_blocks - st.f_bfree, st.f_files - st.f_ffree

    def leave_free(self, *, pages: int | None = None, inodes: int | None = None) -> None:
        """Limit the filesystem to what it holds now plus ``pages`` pages or ``inodes`` inodes."""
        used_pages, used_inodes = self.usage()
        size = (
            max(used_pages + pages, 1) * PAGE if pages is not None else 64 << 20
        )  # size=0 would mean no limit
        count = used_inodes + inodes if inodes is not None else 100_000
        _mount("-o", f"remount,size={size},nr_inodes={count}", "tmpfs", str(self.root))

    def unlimit(self) -> None:
        """Plenty of room again."""
        self.leave_free()


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A private tmpfs (64 MiB, 100k inodes until a test limits it), unmounted afterwards."""
    root = tmp_path / "disk"
    root.mkdir()
    _mount("-t", "tmpfs", "-o", "size=64m,nr_inodes=100000,mode=0755", "tmpfs", str(root))
    try:
        yield SmallDisk(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def changed_upstream(
    upstream_tree: UpstreamTree, tmp_path: Path
) -> Iterator[tuple[UpstreamTree, UpstreamServer]]:
    """The local upstream after a republish: new Packages.xz bytes (same packages) and a re-signed InRelease."""
    tree = copy_upstream(upstream_tree, tmp_path / "site")
    repo = tree.root / "stable/deb/amd64"
    (repo / "Packages.xz").write_bytes(lzma.compress((repo / "Packages").read_bytes(), preset=1))
    resign_inrelease(tree, repo)
    with UpstreamServer(tree.root) as server:
        yield tree, server


def _sync(tree: UpstreamTree, server: UpstreamServer, dest: Path, version: str) -> CliResult:
    return run_mirror_sync(
        dest,
        server.url,
        tree.public_key,
        "--json",
        "--jobs",
        "2",
        # the republished copy is served at another port: tell the mirror its upstream moved
        "--replace-upstream",
        version=version,
    )


def _mirror_hash(dest: Path) -> str:
    """Every file of the mirror, path and bytes, but staging/ (which a failed sync may keep) and the empty lock file."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(dest):
        dirnames[:] = sorted(d for d in dirnames if Path(dirpath, d) != dest / ".gpu-airgap" / "staging")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path == dest / ".gpu-airgap.lock":
                continue
            digest.update(str(path.relative_to(dest)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _one_sentence(result: CliResult) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("gpu-airgap: error: no space left on the device while writing "), lines[0]
    return lines[0]


def _phase(dest: Path, new_packages: set[str]) -> str:
    """Where the failed sync stopped: ``commit`` when every new package sits complete in staging."""
    staged = {p.name for p in (dest / ".gpu-airgap/staging/stable/deb/amd64").glob("*.deb")}
    return "commit" if new_packages <= staged else "download"


def _sweep(
    disk: SmallDisk, baseline: Path, kind: str, run: Callable[[Path], CliResult], new_packages: set[str]
) -> set[str]:
    """Run ``run`` on a fresh copy of ``baseline`` with 0, 1, 2, … pages (or inodes) free until it succeeds."""
    dest = disk.root / "mirror"
    phases: set[str] = set()
    for free in range(0, 80):
        disk.unlimit()
        shutil.rmtree(dest, ignore_errors=True)
        if baseline.exists():
            shutil.copytree(baseline, dest)
        before = _mirror_hash(dest)
        disk.leave_free(**{kind: free})
        result = run(dest)
        if result.exit_code == 0:
            break
        assert result.exit_code == NO_SPACE, (free, result.stderr)
        _one_sentence(result)
        assert _mirror_hash(dest) == before, (
            f"{kind}={free}: the failed sync changed the mirror ({result.stderr})"
        )
        assert not (dest / ".gpu-airgap/switch.json").exists()
        if baseline.exists():
            assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0, f"{kind}={free}"
        phases.add(_phase(dest, new_packages))
        # Free space again: the next sync completes, reusing what the failed one had verified.
        disk.unlimit()
        again = run(dest)
        assert again.exit_code == 0, again.stderr
        verified = run_cli("mirror", "verify", "--mirror", str(dest))
        assert verified.exit_code == 0, verified.stderr
    else:
        pytest.fail(f"the sync never succeeded with up to 80 free {kind}")
    assert free > 0
    return phases


@pytest.mark.slow
def test_first_sync_on_a_full_disk_says_so_in_one_sentence_and_the_next_sync_completes(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, small_disk: SmallDisk, tmp_path: Path
) -> None:
    # By inodes: the first sync also makes DEST, its lock file and its directories (the page
    # sweep of the update test below covers running out of bytes).
    four = {
        f"{n}_1.17.8-1_amd64.deb"
        for n in (
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base",
            "libnvidia-container-tools",
            "libnvidia-container1",
        )
    }
    phases = _sweep(
        small_disk,
        tmp_path / "no-mirror-yet",
        "inodes",
        lambda dest: _sync(upstream_tree, upstream_server, dest, "1.17.8"),
        four,
    )
    assert phases == {"download", "commit"}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pages", "inodes"])
def test_update_sync_on_a_full_disk_leaves_metadata_and_state_as_they_were(
    upstream_tree: UpstreamTree,
    upstream_server: UpstreamServer,
    changed_upstream: tuple[UpstreamTree, UpstreamServer],
    small_disk: SmallDisk,
    tmp_path: Path,
    kind: str,
) -> None:
    baseline = tmp_path / "baseline"
    assert _sync(upstream_tree, upstream_server, baseline, "1.17.8").exit_code == 0
    tree, server = changed_upstream
    new = {
        f"{n}_1.18.0-1_amd64.deb"
        for n in (
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base",
            "libnvidia-container-tools",
            "libnvidia-container1",
        )
    }
    phases = _sweep(small_disk, baseline, kind, lambda dest: _sync(tree, server, dest, "1.18.0"), new)
    assert phases == {"download", "commit"}


def test_a_sync_that_ran_out_of_space_while_committing_downloads_nothing_again(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, small_disk: SmallDisk
) -> None:
    dest = small_disk.root / "mirror"
    # Find the tightest room in which all four packages download but the commit cannot finish.
    for free in range(1, 40):
        shutil.rmtree(dest, ignore_errors=True)
        small_disk.unlimit()
        small_disk.leave_free(pages=free)
        result = _sync(upstream_tree, upstream_server, dest, "1.17.8")
        assert result.exit_code in (0, NO_SPACE), result.stderr
        if (
            result.exit_code == NO_SPACE
            and len(list((dest / ".gpu-airgap/staging/stable/deb/amd64").glob("*.deb"))) == 4
        ):
            break
    else:
        pytest.fail("no free space left room for the downloads but not for the commit")
    assert "the mirror is unchanged and what was downloaded is kept for the next sync" in _one_sentence(
        result
    )
    assert not (dest / ".gpu-airgap/state.json").exists() and not list(dest.glob("stable/deb/amd64/*"))
    small_disk.unlimit()
    upstream_server.reset()
    again = _sync(upstream_tree, upstream_server, dest, "1.17.8")
    assert again.exit_code == 0, again.stderr
    report = json.loads(again.stdout)
    assert (report["downloaded_files"], report["reused_files"]) == (0, 4)
    assert not [r for r in upstream_server.log if r.path.endswith(".deb")]
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0


def test_bundle_build_on_a_full_disk_says_so_and_leaves_no_file(
    deb_mirror: Path, operator_key: TestKey, small_disk: SmallDisk
) -> None:
    out = small_disk.root / "out"
    out.mkdir()
    small_disk.leave_free(pages=8)
    for split in ([], ["--split", "1M"]):
        result = run_bundle_build(deb_mirror, operator_key, out / "nvct.tar.zst", *split)
        assert result.exit_code == NO_SPACE, result.stderr
        assert "no bundle was written" in _one_sentence(result)
        assert list(out.iterdir()) == []


def test_publish_on_a_full_disk_says_so_and_leaves_the_published_tree_as_it_was(
    deb_mirror: Path, operator_key: TestKey, small_disk: SmallDisk
) -> None:
    out = small_disk.root / "www"

    def publish() -> CliResult:
        return publish_mirror(deb_mirror, out, "http://mirror.internal/nvct", key=operator_key)

    assert publish().exit_code == 0
    before = _mirror_hash(out)
    for kind in ("pages", "inodes"):
        small_disk.leave_free(**{kind: 2})
        result = publish()
        assert result.exit_code == NO_SPACE, result.stderr
        assert f"{out} is unchanged" in _one_sentence(result)
        assert _mirror_hash(out) == before
        assert sorted(p.name for p in small_disk.root.iterdir()) == [".www.publish-lock", "www"]
        small_disk.unlimit()
