"""Planned changes: no-op detection, dry-run diffs, one backup per write, byte-exact revert."""

from __future__ import annotations

from pathlib import Path

import pytest

from configure.changes import FileChange, unified_diff
from configure.journal import Journal, apply_changes
from configure.revert import revert
from plumbing.errors import ProblemsFound, ToolError


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
