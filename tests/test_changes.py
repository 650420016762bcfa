"""Planned changes: no-op detection, dry-run diffs, one backup per write, byte-exact revert."""

from __future__ import annotations

from pathlib import Path

import pytest

from configure.changes import FileChange, unified_diff
from configure.journal import Journal, apply_changes
from configure.revert import revert
from plumbing.errors import ConfigFormatError, ProblemsFound, ToolError


def test_unchanged_files_are_not_written(tmp_path: Path) -> None:
    target = tmp_path / "etc/config.toml"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"same\n")
    before = target.stat().st_mtime_ns
    written = apply_changes("containerd", [FileChange(target, b"same\n", b"same\n")], Journal(tmp_path))
    assert written == []
    assert target.stat().st_mtime_ns == before
    assert Journal(tmp_path).entries() == []


def test_dry_run_diff_shows_new_and_changed_files(tmp_path: Path) -> None:
    diff = unified_diff(
        [
            FileChange(tmp_path / "a.toml", b"x = 1\n", b"x = 2\n"),
            FileChange(tmp_path / "new.toml", None, b"y = 1\n"),
            FileChange(tmp_path / "same.toml", b"z\n", b"z\n"),
        ]
    )
    assert "-x = 1\n+x = 2\n" in diff
    assert "--- /dev/null" in diff and "+y = 1" in diff
    assert "same.toml" not in diff


def test_revert_restores_original_bytes_and_removes_created_files(tmp_path: Path) -> None:
    existing = tmp_path / "etc/containerd/config.toml"
    existing.parent.mkdir(parents=True)
    existing.write_bytes(b"# original\nversion = 2\n")
    existing.chmod(0o640)
    created = tmp_path / "etc/containerd/conf.d/99-nvidia.toml"
    journal = Journal(tmp_path)
    apply_changes(
        "containerd", [FileChange(existing, existing.read_bytes(), b"version = 2\n# v1\n")], journal
    )
    apply_changes(
        "containerd",
        [
            FileChange(existing, existing.read_bytes(), b"version = 2\n# v2\n"),
            FileChange(created, None, b"x\n"),
        ],
        journal,
    )
    assert len(journal.entries()) == 3
    revert("containerd", journal)
    assert existing.read_bytes() == b"# original\nversion = 2\n"
    assert existing.stat().st_mode & 0o777 == 0o640
    assert not created.exists()
    assert journal.entries() == []


def test_a_write_that_fails_puts_back_every_file_the_same_apply_wrote_before_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    earlier = tmp_path / "etc/docker/daemon.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"{}\n")
    apply_changes("docker", [FileChange(earlier, b"{}\n", b'{"a": 1}\n')], journal)  # an earlier run: kept
    journal_before = {p: p.read_bytes() for p in journal.files() if p.exists()}
    existing = tmp_path / "etc/containerd/config.toml"
    existing.parent.mkdir(parents=True)
    existing.write_bytes(b"# original\nversion = 2\n")
    existing.chmod(0o640)
    created = tmp_path / "etc/containerd/conf.d/99-nvidia.toml"
    (tmp_path / "etc/blocker").write_bytes(b"a file where the last write needs a directory\n")
    unwritable = tmp_path / "etc/blocker/nvidia.conf"
    with pytest.raises(ConfigFormatError) as failed:
        apply_changes(
            "containerd",
            [
                FileChange(existing, existing.read_bytes(), b"version = 2\nimports = []\n"),
                FileChange(created, None, b"version = 2\n"),
                FileChange(unwritable, None, b"x\n"),
            ],
            journal,
        )
    assert str(failed.value) == f"{unwritable}: cannot be written: {unwritable.parent} is not a directory"
    assert existing.read_bytes() == b"# original\nversion = 2\n"
    assert existing.stat().st_mode & 0o777 == 0o640
    assert not created.exists() and not created.parent.exists()  # and the directory made for it
    assert not unwritable.exists()
    assert {p: p.read_bytes() for p in journal.files() if p.exists()} == journal_before
    assert [e.engine for e in journal.entries()] == ["docker"]
    assert earlier.read_bytes() == b'{"a": 1}\n'  # an earlier run's write is not this apply's to undo


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755])
def test_revert_of_a_file_deleted_after_we_wrote_it_brings_back_its_bytes_and_its_mode(
    tmp_path: Path, mode: int
) -> None:
    target = tmp_path / "etc/containerd/config.toml"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"# original\nversion = 2\n")
    target.chmod(mode)
    journal = Journal(tmp_path)
    apply_changes("containerd", [FileChange(target, target.read_bytes(), b"version = 2\n# ours\n")], journal)
    target.unlink()  # someone removed the file after we wrote it
    revert("containerd", journal)
    assert target.read_bytes() == b"# original\nversion = 2\n"
    assert target.stat().st_mode & 0o7777 == mode  # not the default mode of a new file
    assert journal.entries() == []


def test_revert_refuses_when_someone_edited_the_file_since(tmp_path: Path) -> None:
    target = tmp_path / "daemon.json"
    target.write_bytes(b"{}\n")
    journal = Journal(tmp_path)
    apply_changes("docker", [FileChange(target, b"{}\n", b'{"a": 1}\n')], journal)
    target.write_bytes(b'{"a": 1, "edited": true}\n')
    with pytest.raises(ProblemsFound, match="edited after gpu-airgap wrote it"):
        revert("docker", journal)
    assert target.read_bytes() == b'{"a": 1, "edited": true}\n'
    revert("docker", journal, force=True)
    assert target.read_bytes() == b"{}\n"


def test_revert_with_nothing_recorded_says_so(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="nothing to revert"):
        revert("crio", Journal(tmp_path))
