"""Pure and on-disk unit tests of the mirror store, target parsing, lockfile and path containment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from mirror.bundle.source import parse_target
from mirror.disk import store
from mirror.errors import MirrorStateError
from mirror.index.repo import MetadataFile
from mirror.model import Package, PackageFormat
from mirror.release.lockfile import LockedPackage, LockedTarget, Lockfile, differences
from mirror.sync import core as sync_lib
from mirror.sync import maintain
from mirror.sync.transaction import CachedResponse, Transaction, read_cache
from plumbing.errors import BusyError, ConfigFormatError, UnsafePathError, UsageError
from tests.fakes import FakeFetcher


def _state(dest: Path) -> store.MirrorState:
    pkg = store.StoredPackage(
        path="stable/deb/amd64/a.deb", size=3, sha512="0" * 128, name="a", version="1", arch="amd64"
    )
    repo = store.RepoRecord(
        key="stable/deb/amd64",
        format="deb",
        arch="amd64",
        channel="stable",
        base_url="http://x/stable/deb/amd64",
        provenance=store.RepoProvenance("F" * 40, None, ()),
        packages=(pkg,),
        releases=(store.Release("1", (pkg.path,)),),
    )
    return store.MirrorState(upstream="http://x", channel="stable", repos=(repo,))


def test_state_round_trips_through_json(tmp_path: Path) -> None:
    state = _state(tmp_path)
    store.write_state(tmp_path, state)
    assert store.MirrorState.load(tmp_path) == state


def test_loading_a_directory_without_state_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(MirrorStateError, match="run `gpu-airgap mirror sync` first"):
        store.MirrorState.load(tmp_path)


def test_damaged_state_is_a_clear_error(tmp_path: Path) -> None:
    store.state_path(tmp_path).parent.mkdir(parents=True)
    store.state_path(tmp_path).write_text("{not json")
    with pytest.raises(MirrorStateError, match=r"cannot read state\.json"):
        store.MirrorState.load(tmp_path)


@pytest.mark.parametrize("text", ["[]", '{"version": 1, "upstream": "x", "channel": "stable", "repos": [1]}'])
def test_state_of_the_wrong_shape_is_a_clear_error(tmp_path: Path, text: str) -> None:
    store.state_path(tmp_path).parent.mkdir(parents=True)
    store.state_path(tmp_path).write_text(text)
    with pytest.raises(MirrorStateError, match=r"state\.json is malformed"):
        store.MirrorState.load(tmp_path)


def test_a_cache_entry_of_the_wrong_shape_is_ignored(tmp_path: Path) -> None:
    with store.locked(tmp_path):
        txn = Transaction(tmp_path)
        txn.remember("http://x/InRelease", CachedResponse(b"signed", '"e"'))
        txn.commit(_state(tmp_path))
    assert read_cache(tmp_path, "http://x/InRelease") == CachedResponse(b"signed", '"e"')
    (info,) = (tmp_path / store.META_DIR / "http-cache").glob("*.json")
    info.write_text("[]")
    assert read_cache(tmp_path, "http://x/InRelease") is None


def test_aborted_transaction_publishes_nothing(tmp_path: Path) -> None:
    with store.locked(tmp_path):
        txn = Transaction(tmp_path)
        txn.package_target("stable/deb/amd64/a.deb").parent.mkdir(parents=True)
        txn.package_target("stable/deb/amd64/a.deb").write_bytes(b"abc")
        txn.stage_metadata("stable/deb/amd64/InRelease", b"signed")
        txn.remember("http://x/InRelease", CachedResponse(b"signed", '"e"'))
        txn.abort()
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".gpu-airgap", ".gpu-airgap.lock"]


def test_commit_publishes_packages_metadata_cache_and_state(tmp_path: Path) -> None:
    with store.locked(tmp_path):
        txn = Transaction(tmp_path)
        target = txn.package_target("stable/deb/amd64/a.deb")
        target.parent.mkdir(parents=True)
        target.write_bytes(b"abc")
        txn.stage_metadata("stable/deb/amd64/InRelease", b"signed")
        txn.remember("http://x/InRelease", CachedResponse(b"signed", '"e"'))
        txn.commit(_state(tmp_path))
    assert (tmp_path / "stable/deb/amd64/a.deb").read_bytes() == b"abc"
    assert (tmp_path / "stable/deb/amd64/InRelease").read_bytes() == b"signed"
    assert read_cache(tmp_path, "http://x/InRelease") == CachedResponse(b"signed", '"e"')
    assert not (tmp_path / ".gpu-airgap/staging").exists()
    assert store.MirrorState.load(tmp_path) == _state(tmp_path)


def test_lock_is_exclusive(tmp_path: Path) -> None:
    busy = pytest.raises(BusyError, match=f"another sync is running on {tmp_path}")
    with store.locked(tmp_path), busy, store.locked(tmp_path):
        pass
    with store.locked(tmp_path):
        pass  # released again


def test_staging_refuses_paths_outside_the_mirror(tmp_path: Path) -> None:
    txn = Transaction(tmp_path)
    with pytest.raises(UnsafePathError):
        txn.package_target("../../etc/passwd")
    with pytest.raises(UnsafePathError):
        txn.stage_metadata("/etc/passwd", b"x")


@pytest.mark.parametrize(
    ("formats", "arches", "expected"),
    [
        (["deb", "rpm"], ["amd64"], [("deb", "amd64"), ("rpm", "x86_64")]),
        (["deb", "rpm"], ["x86_64"], [("deb", "amd64"), ("rpm", "x86_64")]),
        (["rpm"], ["arm64", "aarch64"], [("rpm", "aarch64")]),
        (["deb"], ["ppc64el"], [("deb", "ppc64el")]),
        (["deb", "rpm"], ["sbsa", "arm64"], [("deb", "arm64"), ("rpm", "aarch64")]),
    ],
)
def test_arch_is_accepted_in_either_spelling_and_mapped(
    formats: list[str], arches: list[str], expected: list[tuple[str, str]]
) -> None:
    assert [(t.format.value, t.arch) for t in sync_lib.parse_targets(formats, arches)] == expected


@pytest.mark.parametrize(
    ("spec", "expected"), [("deb/sbsa", ("deb", "arm64")), ("rpm/sbsa", ("rpm", "aarch64"))]
)
def test_bundle_target_takes_cudas_sbsa_name_for_arm64(spec: str, expected: tuple[str, str]) -> None:
    assert parse_target(spec) == expected


def test_unknown_arch_or_format_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown --arch 'i386'"):
        sync_lib.parse_targets(["deb"], ["i386"])
    with pytest.raises(UsageError, match="unknown --format 'apk'"):
        sync_lib.parse_targets(["apk"], ["amd64"])


def _lock() -> Lockfile:
    pkg = LockedPackage(
        "libnvidia-container1", "1.17.8-1", "amd64", "./l.deb", 10, "http://x/l.deb", sha512="a" * 128
    )
    return Lockfile("stable", "http://x", (LockedTarget("deb", "amd64", "1.17.8-1", "F" * 40, (pkg,)),))


def test_lockfile_round_trips_and_is_human_readable() -> None:
    text = _lock().render()
    assert 'name = "libnvidia-container1"' in text and text.startswith("# gpu-airgap.lock")
    assert Lockfile.parse(text) == _lock()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version = 1\nchannel = [", "is not valid TOML"),
        ("version = 7\n", "not a version 1"),
        ('version = 1\nchannel = "stable"\n', "names no packages"),
        (
            'version = 1\nchannel = "stable"\n[[target]]\nformat = "deb"\narch = "amd64"\ntoolkit_version = "1"\n'
            'key_fingerprint = "F"\npackage = [1]\n',
            "lacks a required field",
        ),
    ],
)
def test_broken_lockfile_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ConfigFormatError, match=message):
        Lockfile.parse(text)


def test_lockfile_differences_name_every_change() -> None:
    locked = _lock().targets[0]
    changed = LockedPackage(
        "libnvidia-container1", "1.17.8-1", "amd64", "./l.deb", 11, "http://y/l.deb", sha512="b" * 128
    )
    actual = LockedTarget("deb", "amd64", "1.17.8-1", "E" * 40, (changed,))
    problems = differences(locked, actual)
    assert len(problems) == 3
    assert any("size changed from 10 to 11" in p for p in problems)
    assert any("signed by " + "E" * 40 in p for p in problems)
    assert differences(locked, locked) == []


@dataclass(frozen=True)
class _Snap:
    packages: Sequence[Package]
    fingerprint: str = "F" * 40
    signed_at: datetime | None = None
    metadata: Sequence[MetadataFile] = ()


def test_plan_refuses_a_filename_that_escapes_the_repository() -> None:
    evil = Package(
        PackageFormat.DEB,
        "nvidia-container-toolkit",
        "1.0-1",
        "amd64",
        "../../../etc/x.deb",
        1,
        sha512="0" * 128,
    )

    def loader(fetcher: sync_lib.Fetcher, base: str, fmt: PackageFormat) -> _Snap:
        return _Snap((evil,))

    options = sync_lib.SyncOptions(
        upstream="http://x", targets=(sync_lib.RepoTarget(PackageFormat.DEB, "amd64"),)
    )
    with pytest.raises(UnsafePathError, match="outside http://x/stable/deb/amd64"):
        sync_lib.plan(options, fetcher=FakeFetcher(), loader=loader)


def test_prune_keeps_a_package_a_dropped_release_shares_with_a_kept_one(tmp_path: Path) -> None:
    def pkg(name: str) -> store.StoredPackage:
        path = f"stable/deb/amd64/{name}.deb"
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"x" * 7)
        return store.StoredPackage(path=path, size=7, sha512="0" * 128, name=name, version="1", arch="amd64")

    t1, t2, t3, lib1, lib2 = pkg("toolkit1"), pkg("toolkit2"), pkg("toolkit3"), pkg("lib1"), pkg("lib2")
    releases = (
        store.Release("1", (t1.path, lib1.path)),
        store.Release("2", (t2.path, lib1.path)),  # an older library still satisfies release 2
        store.Release("3", (t3.path, lib2.path)),
    )
    repo = store.RepoRecord(
        key="stable/deb/amd64",
        format="deb",
        arch="amd64",
        channel="stable",
        base_url="http://x/stable/deb/amd64",
        provenance=store.RepoProvenance("F" * 40, None, ()),
        packages=(t1, t2, t3, lib1, lib2),
        releases=releases,
    )
    store.write_state(tmp_path, store.MirrorState(upstream="http://x", channel="stable", repos=(repo,)))

    preview = maintain.prune(tmp_path, 2, dry_run=True)
    assert preview.removed_files == [t1.path] and (tmp_path / t1.path).exists()
    report = maintain.prune(tmp_path, 2)
    assert report.removed_releases == ["stable/deb/amd64 1"]
    assert report.removed_files == [t1.path] and report.freed_bytes == 7
    assert not (tmp_path / t1.path).exists()
    assert all((tmp_path / p.path).exists() for p in (t2, t3, lib1, lib2))
    held = store.MirrorState.load(tmp_path).repos[0]
    assert {p.path for p in held.packages} == {t2.path, t3.path, lib1.path, lib2.path}
    assert maintain.prune(tmp_path, 2).removed_files == []  # a second prune has nothing left to do
