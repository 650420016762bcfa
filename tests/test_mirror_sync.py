"""Acceptance: ``gpu-airgap mirror sync|plan|status|verify|prune`` against the local NVIDIA-like upstream.

Every test runs the real code path: real HTTP on 127.0.0.1, real gpg signatures, real .deb/.rpm
files; a failing sync must leave the previous good mirror byte-identical.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mirror.disk import store
from mirror.disk.trust import open_keyring
from mirror.sync import core as sync_lib
from mirror.sync import progress
from mirror.sync.http import Downloader
from plumbing.errors import BusyError, ExitCode
from tests.cli_runner import CliResult, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.upstream import (
    Fault,
    UpstreamServer,
    UpstreamTree,
    copy_upstream,
    make_wrong_key,
    resign_inrelease,
    sign_clear,
    stop_agent,
)

FOUR = {
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
}
REAL_UPSTREAM = Path(__file__).parent / "data" / "real-upstream"


@pytest.fixture
def site(upstream_tree: UpstreamTree, upstream_server: UpstreamServer) -> tuple[UpstreamTree, UpstreamServer]:
    """The shared upstream and its server (faults are injected per request; files stay untouched)."""
    return upstream_tree, upstream_server


@pytest.fixture
def tampered_site(
    upstream_tree: UpstreamTree, tmp_path: Path
) -> Iterator[tuple[UpstreamTree, UpstreamServer]]:
    """A private copy of the upstream (the test edits its files) and a server over it."""
    copy = copy_upstream(upstream_tree, tmp_path / "site")
    with UpstreamServer(copy.root) as server:
        yield copy, server


def _sync(server: UpstreamServer, tree: UpstreamTree, dest: Path, *args: str) -> CliResult:
    return run_mirror_sync(dest, server.url, tree.public_key, *args, version=None, fmt=None, arch=None)


def _tree_hash(root: Path) -> str:
    """One digest over every path and file content below ``root``."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath, name)
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        for name in dirnames:
            digest.update(str(Path(dirpath, name).relative_to(root)).encode() + b"/\0")
    return digest.hexdigest()


def _held(dest: Path, key: str) -> dict[str, str]:
    repo = store.MirrorState.load(dest).repo(key)
    assert repo is not None
    return {p.name: p.version for p in repo.packages}


# -- selection ---------------------------------------------------------------------------------


def test_sync_pinned_1_17_8_takes_the_four_packages_of_that_release(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    result = _sync(server, tree, dest, "--version", "1.17.8", "--format", "deb", "--arch", "amd64", "--json")
    assert result.exit_code == 0, result.stderr
    assert _held(dest, "stable/deb/amd64") == dict.fromkeys(FOUR, "1.17.8-1")
    debs = sorted(p.name for p in (dest / "stable/deb/amd64").glob("*.deb"))
    assert debs == sorted(f"{n}_1.17.8-1_amd64.deb" for n in FOUR)
    assert (dest / "stable/deb/amd64/InRelease").read_bytes() == (
        tree.root / "stable/deb/amd64/InRelease"
    ).read_bytes()
    report = json.loads(result.stdout)
    assert report["targets"][0]["toolkit_version"] == "1.17.8-1"
    assert report["downloaded_files"] == 4


@pytest.mark.parametrize(
    ("channel", "fmt", "arch", "key", "expected"),
    [
        ("stable", "deb", "amd64", "stable/deb/amd64", "1.20.1-1"),
        ("stable", "rpm", "x86_64", "stable/rpm/x86_64", "1.20.1-1"),
        ("stable", "rpm", "amd64", "stable/rpm/x86_64", "1.20.1-1"),  # apt spelling mapped
        ("experimental", "deb", "amd64", "experimental/deb/amd64", "1.20.0~rc.1-1"),
        ("experimental", "rpm", "x86_64", "experimental/rpm/x86_64", "1.20.0~rc.1-1"),
    ],
)
def test_sync_latest_takes_the_newest_release_of_the_channel(
    site: tuple[UpstreamTree, UpstreamServer],
    tmp_path: Path,
    channel: str,
    fmt: str,
    arch: str,
    key: str,
    expected: str,
) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    result = _sync(server, tree, dest, "--channel", channel, "--format", fmt, "--arch", arch)
    assert result.exit_code == 0, result.stderr
    assert set(_held(dest, key).values()) == {expected}
    assert set(_held(dest, key)) == FOUR
    assert ("not for production" in result.stderr) == (channel == "experimental")


def test_sync_pinned_rpm_takes_the_four_packages_of_that_release(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    assert (
        _sync(server, tree, dest, "--version", "1.17.8", "--format", "rpm", "--arch", "x86_64").exit_code == 0
    )
    assert _held(dest, "stable/rpm/x86_64") == dict.fromkeys(FOUR, "1.17.8-1")
    assert len(list((dest / "stable/rpm/x86_64").glob("*.rpm"))) == 4
    # repomd.xml names filelists and other too: they are mirrored (checksum-verified) so the tree is servable.
    assert {p.name.split("-")[-1] for p in (dest / "stable/rpm/x86_64/repodata").glob("*.xml.*")} >= {
        "primary.xml.gz",
        "filelists.xml.gz",
        "other.xml.gz",
    }
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0


def test_sync_all_mirrors_every_package_of_the_index_and_records_each_release(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    dest, lock = tmp_path / "mirror", tmp_path / "all.lock"
    result = _sync(server, tree, dest, "--version", "all", "--write-lock", str(lock), "--json")
    assert result.exit_code == 0, result.stderr
    state = store.MirrorState.load(dest)
    for key, repo_dir, suffix in (
        ("stable/deb/amd64", tree.deb_repo("stable", "amd64"), ".deb"),
        ("stable/rpm/x86_64", tree.rpm_repo("stable", "x86_64"), ".rpm"),
    ):
        repo = state.repo(key)
        assert repo is not None
        upstream_files = sorted(p.name for p in repo_dir.iterdir() if p.suffix == suffix)
        assert sorted(Path(p.path).name for p in repo.packages) == upstream_files
        assert sorted(p.name for p in (dest / key).glob(f"*{suffix}")) == upstream_files
        # Each release names exactly its four packages at its own version, oldest first, the newest last.
        assert [r.toolkit_version for r in repo.releases] == list(tree.versions("stable"))
        for release in repo.releases:
            held = [repo.package(path) for path in release.packages]
            assert {(p.name, p.version) for p in held} == {(n, release.toolkit_version) for n in FOUR}
    report = json.loads(result.stdout)
    assert report["targets"][0]["releases"][-1] == report["targets"][0]["toolkit_version"] == "1.20.1-1"
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0

    # Nothing new upstream: the re-sync fetches no package, and the lockfile reproduces the same mirror.
    server.clear()
    again = _sync(server, tree, dest, "--version", "all", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["downloaded_bytes"] == 0
    assert _sync(server, tree, tmp_path / "locked", "--locked", str(lock)).exit_code == 0
    relocked = store.MirrorState.load(tmp_path / "locked")
    assert [(r.packages, r.releases) for r in relocked.repos] == [
        (r.packages, r.releases) for r in state.repos
    ]


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (("--version", "1.17.8", "--target", "deb/amd64", "--target", "rpm/x86_64"), "1.17.8-1"),
        (("--locked",), "1.20.1-1"),
    ],
)
def test_a_bundle_from_a_full_mirror_carries_only_the_chosen_releases_four_packages(
    site: tuple[UpstreamTree, UpstreamServer],
    tmp_path: Path,
    operator_key: TestKey,
    selection: tuple[str, ...],
    expected: str,
) -> None:
    tree, server = site
    dest, lock = tmp_path / "mirror", tmp_path / "all.lock"
    assert _sync(server, tree, dest, "--version", "all", "--write-lock", str(lock), "--quiet").exit_code == 0
    args = (*selection, str(lock)) if selection == ("--locked",) else selection
    built = run_bundle_build(
        dest, operator_key, tmp_path / "b.tar", *args, "--compression", "none", version=None, target=None
    )
    assert built.exit_code == 0, built.stderr
    inspected = json.loads(run_cli("bundle", "inspect", str(tmp_path / "b.tar"), "--json").stdout)
    assert len(inspected["targets"]) == 2
    for target in inspected["targets"]:
        assert {(p["name"], p["version"]) for p in target["packages"]} == {(n, expected) for n in FOUR}


# -- failures leave the previous mirror byte-identical ----------------------------------------


def _tamper_packages(tree: UpstreamTree, server: UpstreamServer) -> None:
    repo = tree.root / "stable/deb/amd64"
    text = (repo / "Packages").read_text().replace("Version: 1.20.1-1", "Version: 1.20.9-1", 1)
    (repo / "Packages").write_text(text)
    (repo / "Packages.xz").write_bytes(lzma.compress(text.encode()))


def _other_key(tree: UpstreamTree, server: UpstreamServer) -> None:
    wrong = make_wrong_key(tree.root.parent / "wrong-gnupg")
    resign_inrelease(tree, tree.root / "stable/deb/amd64", key=wrong)
    stop_agent(wrong.gnupghome)  # signing started its gpg-agent


def _bad_signature(tree: UpstreamTree, server: UpstreamServer) -> None:
    path = tree.root / "stable/deb/amd64/InRelease"
    path.write_bytes(path.read_bytes().replace(b"Components: main", b"Components: mainx", 1))


def _empty_inrelease(tree: UpstreamTree, server: UpstreamServer) -> None:
    (tree.root / "stable/deb/amd64/InRelease").write_bytes(sign_clear(tree, b""))


def _corrupt_deb(tree: UpstreamTree, server: UpstreamServer) -> None:
    server.inject("stable/deb/amd64/nvidia-container-toolkit_1.20.1-1_amd64.deb", Fault.corrupt(100))


def _truncate_rpm(tree: UpstreamTree, server: UpstreamServer) -> None:
    path = tree.root / "stable/rpm/x86_64/libnvidia-container1-1.20.1-1.x86_64.rpm"
    path.write_bytes(path.read_bytes()[:-500])


def _missing_deb(tree: UpstreamTree, server: UpstreamServer) -> None:
    server.inject("stable/deb/amd64/libnvidia-container1_1.20.1-1_amd64.deb", Fault.not_found())


@pytest.mark.parametrize(
    ("breakage", "exit_code", "message"),
    [
        (
            _tamper_packages,
            ExitCode.VERIFICATION_FAILED,
            "Packages.xz (size) does not match its signed checksum",
        ),
        (_other_key, ExitCode.VERIFICATION_FAILED, "InRelease"),
        (_bad_signature, ExitCode.VERIFICATION_FAILED, "InRelease"),
        (_empty_inrelease, ExitCode.VERIFICATION_FAILED, "/stable/deb/amd64/InRelease is empty"),
        (
            _corrupt_deb,
            ExitCode.VERIFICATION_FAILED,
            "nvidia-container-toolkit_1.20.1-1_amd64.deb does not match",
        ),
        (_truncate_rpm, ExitCode.VERIFICATION_FAILED, "libnvidia-container1-1.20.1-1.x86_64.rpm"),
        (_missing_deb, ExitCode.NETWORK, "HTTP 404"),
    ],
    ids=[
        "tampered-packages",
        "other-key",
        "bad-signature",
        "empty-inrelease",
        "corrupted-deb",
        "truncated-rpm",
        "404",
    ],
)
def test_failed_sync_reports_one_sentence_and_leaves_the_mirror_byte_identical(
    tampered_site: tuple[UpstreamTree, UpstreamServer],
    tmp_path: Path,
    breakage: object,
    exit_code: ExitCode,
    message: str,
) -> None:
    tree, server = tampered_site
    dest = tmp_path / "mirror"
    assert _sync(server, tree, dest, "--version", "1.17.8", "--arch", "amd64").exit_code == 0
    before = _tree_hash(dest)
    breakage(tree, server)  # type: ignore[operator]
    result = _sync(server, tree, dest, "--arch", "amd64")
    assert result.exit_code == exit_code, result.stderr
    assert message in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("gpu-airgap: error:")]
    assert len(error_lines) == 1
    assert "Traceback" not in result.stderr
    assert _tree_hash(dest) == before


# -- network behaviour -------------------------------------------------------------------------


def test_dropped_connection_is_resumed_with_a_range_request(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    name = "stable/deb/amd64/nvidia-container-toolkit-base_1.20.1-1_amd64.deb"
    server.inject(name, Fault.drop_after(1000))
    result = _sync(server, tree, tmp_path / "mirror", "--format", "deb", "--json")
    assert result.exit_code == 0, result.stderr
    ranges = [r.range for r in server.requests_for(name)]
    assert ranges == [None, "bytes=1000-"]
    assert (tmp_path / "mirror" / name).read_bytes() == (tree.root / name).read_bytes()


def test_sync_after_a_killed_run_keeps_its_verified_files_and_resumes_its_partial_ones(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    # What a SIGKILLed sync leaves: staging/ with one complete package, one .part file, and one
    # file of the right size but wrong bytes (never trusted: only the signed digest counts).
    tree, server = site
    dest = tmp_path / "mirror"
    repo = "stable/deb/amd64"
    done, partial, bad = (
        f"{repo}/{n}_1.20.1-1_amd64.deb"
        for n in ("libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit")
    )
    staging = dest / ".gpu-airgap" / "staging"
    (staging / repo).mkdir(parents=True)
    (staging / done).write_bytes((tree.root / done).read_bytes())
    (staging / repo / f".{Path(partial).name}.part").write_bytes((tree.root / partial).read_bytes()[:1000])
    (staging / bad).write_bytes(b"x" * (tree.root / bad).stat().st_size)

    result = _sync(server, tree, dest, "--format", "deb")

    assert result.exit_code == 0, result.stderr
    assert server.requests_for(done) == []
    assert [r.range for r in server.requests_for(partial)] == ["bytes=1000-"]
    assert [r.range for r in server.requests_for(bad)] == [None]
    for name in (done, partial, bad):
        assert (dest / name).read_bytes() == (tree.root / name).read_bytes()
    assert not staging.exists()


def _threads(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread of ``pid``: its scheduler state (``S`` = asleep) and how often it has gone to sleep."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = dict(
            line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line
        )
        found[int(task.name)] = (status["State"][0], int(status["voluntary_ctxt_switches"]))
    return found


#: python3 with SIGINT's default action, then exec'd as python3 ARGS: a pytest started in the
#: background by a shell ignores SIGINT, its children inherit that, and Python then installs no
#: handler (the sync would never see the Ctrl-C this test sends)
_WITH_SIGINT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]


def _signal_bits(pid: int, field: str) -> int:
    """A signal mask of ``/proc/PID/status`` (``SigCgt``, ``ShdPnd``...) as an int."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``condition`` (it watches another process: there is nothing to wait on) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


def _asleep_and_still(pid: int) -> bool:
    """Every thread of ``pid`` sleeps and none ran between two looks."""
    first = _threads(pid)
    time.sleep(0.01)
    return first == _threads(pid) and all(state == "S" for state, _ in first.values())


def test_ctrl_c_stops_the_sync_publishes_nothing_and_the_rerun_skips_what_had_arrived(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    # A real SIGINT to a real `gpu-airgap mirror sync` process, one download at a time. The second
    # package's answer stalls after 500 bytes, so the first has arrived and the second is in flight;
    # it stays stalled until the process has taken the signal, so the sync cannot finish first.
    tree, server = site
    dest = tmp_path / "mirror"
    order = [
        f"stable/deb/amd64/{n}_1.20.1-1_amd64.deb"
        for n in (
            "libnvidia-container1",
            "libnvidia-container-tools",
            "nvidia-container-toolkit-base",
            "nvidia-container-toolkit",
        )
    ]
    held = server.inject(order[1], Fault.hold(500))
    argv = [
        *_WITH_SIGINT,
        "-m",
        "mirror",
        "mirror",
        "sync",
        "--dest",
        str(dest),
        "--upstream",
        server.url,
        "--keyring",
        str(tree.public_key),
        "--format",
        "deb",
        "--jobs",
        "1",
        "--quiet",
    ]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    try:
        held.wait_stalled()
        assert (dest / ".gpu-airgap/staging" / order[0]).is_file()  # one download at a time: done
        # The process waits on the stalled download: its downloader blocked reading, its main thread
        # waiting for that download. Python takes SIGINT in the main thread (Linux delivers it there
        # first), which then cancels the downloads and waits again: that second sleep is the sign.
        _until(lambda: _asleep_and_still(proc.pid), "the sync waits on the stalled download")
        assert _signal_bits(proc.pid, "SigCgt") & (1 << (signal.SIGINT - 1)), "the sync does not catch SIGINT"
        before = _threads(proc.pid)[proc.pid][1]
        proc.send_signal(signal.SIGINT)

        def took_it() -> bool:
            state, sleeps = _threads(proc.pid)[proc.pid]
            return not _signal_bits(proc.pid, "ShdPnd") and state == "S" and sleeps > before

        _until(took_it, "the sync took the signal")
        held.release()
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (
        proc.returncode == 130
        and "warning: interrupted; the mirror is unchanged and the next sync resumes" in stderr
    ), stderr
    assert not store.state_path(dest).exists() and not list(dest.glob("stable/deb/amd64/*.deb"))
    in_flight = dest / ".gpu-airgap/staging/stable/deb/amd64" / f".{Path(order[1]).name}.part"
    assert in_flight.stat().st_size >= 500  # what had arrived of the held-back package is kept too
    assert not (dest / ".gpu-airgap/staging" / order[2]).exists()  # the rest never started
    assert [r.path.lstrip("/") for r in server.log if r.path.endswith(".deb")] == order[:2]

    server.clear()
    result = _sync(server, tree, dest, "--format", "deb", "--json")
    assert result.exit_code == 0, result.stderr
    assert not server.requests_for(order[0]) and json.loads(result.stdout)["reused_files"] >= 1
    assert all(
        r.range for r in server.requests_for(order[1])
    )  # resumed (or already whole), never fetched again
    assert _held(dest, "stable/deb/amd64") == dict.fromkeys(FOUR, "1.20.1-1")
    for name in order:
        assert (dest / name).read_bytes() == (tree.root / name).read_bytes()


def test_503_then_200_is_retried_after_a_backoff(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    name = "stable/rpm/x86_64/nvidia-container-toolkit-1.20.1-1.x86_64.rpm"
    server.inject(name, Fault.fail_first(2, status=503))
    sleeps: list[float] = []
    options = sync_lib.SyncOptions(
        upstream=server.url, targets=(sync_lib.RepoTarget(sync_lib.PackageFormat.RPM, "x86_64"),)
    )
    with open_keyring([tree.public_key]) as ring, Downloader(sleep=sleeps.append) as dl:
        sync_lib.sync(options, tmp_path / "m", downloader=dl, loader=sync_lib.make_loader(ring))
    assert [r.status for r in server.requests_for(name)] == [503, 503, 200]
    assert sleeps == [0.5, 1.0]
    assert (tmp_path / "m" / name).read_bytes() == (tree.root / name).read_bytes()


def test_second_sync_without_upstream_change_downloads_no_package_bytes(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    assert _sync(server, tree, dest).exit_code == 0
    before = _tree_hash(dest)
    before_synced_at = json.loads(store.state_path(dest).read_text())["repos"][0]["synced_at"]
    server.clear()
    result = _sync(server, tree, dest, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["downloaded_bytes"] == 0 and report["reused_files"] == 8
    assert not [r for r in server.log if r.path.endswith((".deb", ".rpm"))]
    assert {r.status for r in server.log} == {304}  # metadata revalidated, nothing re-sent
    assert report["seconds"] < 1.0
    # Only the "synced_at" check time may move on (it is to the second, so two syncs can straddle one).
    after_state = store.state_path(dest).read_text()
    after_synced_at = json.loads(after_state)["repos"][0]["synced_at"]
    store.state_path(dest).write_text(after_state.replace(after_synced_at, before_synced_at))
    assert _tree_hash(dest) == before


def test_a_second_sync_on_a_locked_mirror_is_refused(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    with store.locked(dest):
        result = _sync(server, tree, dest)
        with pytest.raises(BusyError), store.locked(dest):
            pass
    assert result.exit_code == ExitCode.BUSY
    assert "another sync is running on" in result.stderr
    assert not server.log


# -- lockfile ----------------------------------------------------------------------------------


def test_locked_sync_reproduces_the_written_lockfile(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    lock = tmp_path / "gpu-airgap.lock"
    assert (
        _sync(server, tree, tmp_path / "a", "--version", "1.17.8", "--write-lock", str(lock)).exit_code == 0
    )
    text = lock.read_text()
    assert 'toolkit_version = "1.17.8-1"' in text and tree.key_fingerprint in text
    result = _sync(server, tree, tmp_path / "b", "--locked", str(lock))
    assert result.exit_code == 0, result.stderr
    a, b = store.MirrorState.load(tmp_path / "a"), store.MirrorState.load(tmp_path / "b")
    assert [r.packages for r in a.repos] == [r.packages for r in b.repos]
    # what the node must provide and what the packages break travel with a locked set too
    assert [r.releases for r in a.repos] == [r.releases for r in b.repos]
    assert any("libc6" in req for r in b.repos for rel in r.releases for req in rel.node_requirements)


def test_locked_sync_names_what_differs_and_changes_nothing(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    lock = tmp_path / "gpu-airgap.lock"
    assert (
        _sync(
            server, tree, tmp_path / "a", "--version", "1.17.8", "--format", "deb", "--write-lock", str(lock)
        ).exit_code
        == 0
    )
    text = lock.read_text().replace(
        'version = "1.17.8-1"\narch = "amd64"', 'version = "1.17.7-1"\narch = "amd64"', 1
    )
    lock.write_text(text)
    before = _tree_hash(tmp_path / "a")
    result = _sync(server, tree, tmp_path / "a", "--locked", str(lock))
    assert result.exit_code == ExitCode.UNRESOLVABLE
    assert "1.17.7-1 (amd64) is no longer in deb/amd64" in result.stderr
    assert _tree_hash(tmp_path / "a") == before


# -- plan, status, verify, prune ---------------------------------------------------------------


@pytest.mark.parametrize(("version", "expected"), [("1.17.8", "1.17.8-1"), ("latest", "1.20.1-1")])
def test_plan_against_the_real_nvidia_files_prints_the_right_set(version: str, expected: str) -> None:
    with UpstreamServer(REAL_UPSTREAM) as server:
        result = run_cli(
            "mirror", "plan", "--upstream", server.url, "--format", "deb", "--version", version, "--json"
        )
        assert result.exit_code == 0, result.stderr
        assert not [r for r in server.log if r.path.endswith(".deb")]
    report = json.loads(result.stdout)
    packages = report["targets"][0]["packages"]
    assert {p["name"]: p["version"] for p in packages} == dict.fromkeys(FOUR, expected)
    assert all(len(p["sha512"]) == 128 and p["size"] > 0 for p in packages)
    assert report["total_bytes"] == sum(p["size"] for p in packages)


def test_plan_all_against_the_real_nvidia_files_takes_every_stanza_and_each_of_the_28_releases() -> None:
    stanzas = (REAL_UPSTREAM / "stable/deb/amd64/Packages").read_text().strip().split("\n\n")
    with UpstreamServer(REAL_UPSTREAM) as server:
        result = run_cli(
            "mirror", "plan", "--upstream", server.url, "--format", "deb", "--version", "all", "--json"
        )
    assert result.exit_code == 0, result.stderr
    target = json.loads(result.stdout)["targets"][0]
    assert len(target["packages"]) == len(stanzas) == 170
    assert {"nvidia-docker2", "nvidia-container-runtime", "libnvidia-container1-dbg"} <= {
        p["name"] for p in target["packages"]
    }
    assert (
        len(target["releases"]) == 28
        and target["releases"][0] == "1.14.0-1"
        and target["releases"][-1] == "1.20.1-1"
    )


def test_plan_prints_a_human_table_with_total(site: tuple[UpstreamTree, UpstreamServer]) -> None:
    tree, server = site
    result = run_cli(
        "mirror", "plan", "--upstream", server.url, "--keyring", str(tree.public_key), "--version", "1.17.8"
    )
    assert result.exit_code == 0, result.stderr
    assert "stable/deb/amd64: nvidia-container-toolkit 1.17.8-1 (4 packages" in result.stdout
    assert "stable/rpm/x86_64: nvidia-container-toolkit 1.17.8-1 (4 packages" in result.stdout
    assert "total:" in result.stdout and "8 package file(s)" in result.stdout


def test_status_shows_held_releases_and_newer_upstream(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    assert _sync(server, tree, dest, "--version", "1.17.8", "--format", "deb").exit_code == 0
    before = _tree_hash(dest)
    result = run_cli("mirror", "status", "--mirror", str(dest), "--keyring", str(tree.public_key), "--json")
    assert result.exit_code == 0, result.stderr
    (repo,) = json.loads(result.stdout)["repos"]
    assert (
        repo["releases"] == ["1.17.8-1"] and repo["upstream_latest"] == "1.20.1-1" and repo["newer_upstream"]
    )
    assert _tree_hash(dest) == before


def test_verify_finds_a_changed_file(site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    assert _sync(server, tree, dest, "--format", "deb").exit_code == 0
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0
    deb = dest / "stable/deb/amd64/libnvidia-container1_1.20.1-1_amd64.deb"
    data = bytearray(deb.read_bytes())
    data[10] ^= 0xFF
    deb.write_bytes(bytes(data))
    result = run_cli("mirror", "verify", "--mirror", str(dest))
    assert result.exit_code == ExitCode.PROBLEMS_FOUND
    assert "libnvidia-container1_1.20.1-1_amd64.deb does not match its recorded sha512" in result.stderr
    as_json = run_cli("mirror", "verify", "--mirror", str(dest), "--json")
    assert as_json.exit_code == ExitCode.PROBLEMS_FOUND
    (problem,) = json.loads(as_json.stdout)["problems"]  # stdout is one object, even on failure
    assert "libnvidia-container1_1.20.1-1_amd64.deb does not match" in problem


def test_prune_keeps_the_newest_releases_and_what_they_need(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    dest = tmp_path / "mirror"
    for version in ("1.17.8", "1.18.0", "latest"):
        assert _sync(server, tree, dest, "--version", version, "--format", "deb").exit_code == 0
    result = run_cli("mirror", "prune", "--mirror", str(dest), "--keep", "2", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["removed_releases"] == ["stable/deb/amd64 1.17.8-1"]
    repo = store.MirrorState.load(dest).repo("stable/deb/amd64")
    assert repo is not None and [r.toolkit_version for r in repo.releases] == ["1.18.0-1", "1.20.1-1"]
    assert not list((dest / "stable/deb/amd64").glob("*1.17.8-1*"))
    assert len(list((dest / "stable/deb/amd64").glob("*.deb"))) == 8
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0


# -- output modes --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["plain", "quiet", "json"])
def test_sync_output_plain_lines_on_a_pipe_nothing_when_quiet_one_object_with_json(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path, mode: str
) -> None:
    tree, server = site
    flags = {"plain": [], "quiet": ["--quiet"], "json": ["--json"]}[mode]
    result = _sync(server, tree, tmp_path / "mirror", "--channel", "experimental", "--format", "deb", *flags)
    assert result.exit_code == 0, result.stderr
    warning = "warning: the experimental channel carries release candidates, which are not for production"
    if mode == "quiet":
        assert result.stdout == "" and result.stderr == ""
        return
    assert result.stderr.splitlines()[0] == warning  # the warning goes to stderr in every other mode
    if mode == "json":
        report = json.loads(result.stdout)  # the whole of stdout is one object
        assert report["channel"] == "experimental" and report["downloaded_files"] == 4
        assert result.stderr.strip() == warning  # no progress lines either
    else:
        assert "downloading 4 file(s)" in result.stderr  # plain progress lines, not a bar, on a pipe
        assert result.stdout.splitlines()[-1].startswith(
            f"synced {tmp_path / 'mirror'}: downloaded 4 file(s)"
        )


def test_progress_is_a_bar_on_a_terminal_and_lines_on_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Tty())
    assert isinstance(progress.choose(quiet=False, json_output=False), progress.BarProgress)
    assert isinstance(progress.choose(quiet=True, json_output=False), progress.QuietProgress)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert isinstance(progress.choose(quiet=False, json_output=False), progress.LineProgress)
    assert isinstance(progress.choose(quiet=False, json_output=True), progress.QuietProgress)


def test_a_bad_version_selector_is_a_usage_error_before_anything_is_fetched(
    site: tuple[UpstreamTree, UpstreamServer], tmp_path: Path
) -> None:
    tree, server = site
    before = len(server.log)
    result = _sync(server, tree, tmp_path / "m", "--version", "banana")
    assert result.exit_code == ExitCode.USAGE
    assert "invalid version selector 'banana'" in result.stderr
    assert len(server.log) == before and not (tmp_path / "m").exists()
