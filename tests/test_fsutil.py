"""The write discipline every config and mirror file goes through."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from plumbing.errors import ConfigFormatError, ExitCode, FileWriteError, UnsafePathError
from plumbing.fsutil import atomic_write, read_regular, rooted, safe_join


@pytest.mark.parametrize(
    "relative",
    ["../etc/passwd", "/etc/passwd", "a/../../b", "", "a/\x00b", "..", "a\\..\\b"],
)
def test_safe_join_refuses_paths_that_escape(tmp_path: Path, relative: str) -> None:
    with pytest.raises(UnsafePathError):
        safe_join(tmp_path, relative)


def test_safe_join_accepts_flat_repo_filenames(tmp_path: Path) -> None:
    assert safe_join(tmp_path, "./pkg_1.0-1_amd64.deb") == tmp_path / "pkg_1.0-1_amd64.deb"


def test_rooted_maps_system_paths_under_the_root(tmp_path: Path) -> None:
    assert rooted(tmp_path, "/etc/containerd/config.toml") == tmp_path / "etc/containerd/config.toml"
    assert rooted("/", "/etc/docker/daemon.json") == Path("/etc/docker/daemon.json")


def test_atomic_write_keeps_mode_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    target.write_bytes(b"old")
    target.chmod(0o600)
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_atomic_write_creates_parents_with_default_mode(tmp_path: Path) -> None:
    target = tmp_path / "etc" / "cdi" / "nvidia.yaml"
    atomic_write(target, b"x")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_atomic_write_into_unwritable_directory_is_a_clear_general_file_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(FileWriteError, match="cannot write") as caught:
        atomic_write(blocker / "child.toml", b"x")
    assert caught.value.exit_code == ExitCode.ERROR  # a general file error, not an engine config's (exit 5)
    assert blocker.read_bytes() == b""
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_only_the_running_system_is_a_live_root(tmp_path: Path) -> None:
    from plumbing.fsutil import is_live_root

    assert is_live_root("/") and is_live_root("") and is_live_root(Path("//")) and is_live_root("/.")
    link = tmp_path / "host"
    link.symlink_to("/")
    assert is_live_root(link)  # a path that resolves to / is the running system too
    assert not is_live_root(tmp_path)


def test_read_regular_refuses_fifos_sockets_devices_and_directories_naming_what_they_are(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    with pytest.raises(
        ConfigFormatError, match=r"config\.toml: is a FIFO \(named pipe\), not a regular file"
    ):
        read_regular(fifo)
    device = tmp_path / "daemon.json"
    device.symlink_to("/dev/null")  # followed: the file read is the device
    with pytest.raises(ConfigFormatError, match=r"daemon\.json: is a character device, not a regular file"):
        read_regular(device)
    sock_path = tmp_path / "state.json"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(sock_path))
        with pytest.raises(ConfigFormatError, match=r"state\.json: is a socket, not a regular file"):
            read_regular(sock_path)
    with pytest.raises(ConfigFormatError, match="is a directory, not a file"):
        read_regular(tmp_path)


def test_read_regular_reads_a_file_and_says_none_for_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert read_regular(path) is None
    path.write_bytes(b"version = 2\n" * 200_000)  # more than one read's worth
    assert read_regular(path) == b"version = 2\n" * 200_000
