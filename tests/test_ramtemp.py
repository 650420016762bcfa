"""tests/ramtemp.py: the session's temporary files on tmpfs, only where there is room, and never lost mounts."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import ramtemp


def test_the_disk_is_kept_when_asked_or_when_memory_is_short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_AIRGAP_TEST_TMP", raising=False)
    monkeypatch.setattr(ramtemp, "NEEDS", 1 << 20)
    assert ramtemp.has_room() is ramtemp.is_tmpfs(ramtemp.RAM)  # a megabyte is always there
    monkeypatch.setenv("GPU_AIRGAP_TEST_TMP", "disk")
    assert not ramtemp.has_room()
    monkeypatch.delenv("GPU_AIRGAP_TEST_TMP")
    monkeypatch.setattr(ramtemp, "NEEDS", 1 << 60)
    assert not ramtemp.has_room()


def test_the_session_tmpdir_is_on_tmpfs_and_open_to_every_user_like_tmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", "/tmp"))  # restored after the test
    monkeypatch.setattr(tempfile, "tempdir", None)
    base = ramtemp.start()
    try:
        tmp = base / "tmp"
        assert os.environ["TMPDIR"] == str(tmp) and Path(tempfile.gettempdir()) == tmp
        assert base.parent == ramtemp.RAM
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o1777 and stat.S_IMODE(base.stat().st_mode) == 0o755
    finally:
        assert ramtemp.finish(base) is None
    assert not base.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_mount_left_under_the_session_directory_keeps_the_directory_and_is_named(tmp_path: Path) -> None:
    base = tmp_path / "session"
    mounted = base / "pytest" / "node"
    mounted.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mounted)], check=True)
    try:
        (mounted / "kept").write_text("a file on the mount")
        said = ramtemp.finish(base)
        assert said == f"{base} was left in place: {mounted} is still mounted there"
        assert (mounted / "kept").read_text() == "a file on the mount"
    finally:
        subprocess.run(["umount", str(mounted)], check=True)
    assert ramtemp.finish(base) is None and not base.exists()
