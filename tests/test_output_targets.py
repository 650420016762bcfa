"""Issue 24.9: ``--output`` writes through a character device, a pipe or a link to one, and refuses a directory.

Replacing ``/dev/null`` (or the link ``/dev/stdout``) with a regular file breaks the machine; the
bytes are streamed into such a target instead. :func:`plumbing.output_target.output_is_stream` decides
for every ``--output`` writer (``bundle build``, ``bundle pull``, ``fleet k8s``, ``fleet image``).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import pytest

from plumbing.errors import ExitCode, UsageError
from plumbing.output_target import output_is_stream, write_output
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey

GPU_AIRGAP = [sys.executable, "-m", "mirror"]
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
K8S = ["fleet", "k8s", "--bundle-url", "http://10.0.0.1/b.tar.zst", "--bundle-sha256", "ab" * 32]


def _is_dev_null(path: Path) -> bool:
    return stat.S_ISCHR(path.stat().st_mode) and os.path.realpath(path) == "/dev/null"


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: List[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, b"manifests\n")
    reader.join(timeout=10)
    assert got == [b"manifests\n"] and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_regular_file_and_a_new_name_are_files_not_streams(tmp_path: Path) -> None:
    (tmp_path / "old").write_bytes(b"x")
    assert not output_is_stream(tmp_path / "old") and not output_is_stream(tmp_path / "new")
    assert output_is_stream(Path("/dev/null"))


def test_a_directory_is_refused_naming_what_it_is(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--output .* is a directory; name a file, a character device"):
        write_output(tmp_path, b"x")


@pytest.fixture()
def null_link(tmp_path: Path) -> Path:
    link = tmp_path / "discard.yaml"
    link.symlink_to("/dev/null")
    return link


def _as_nobody() -> List[str]:
    """Run a command whose regression would replace /dev/null or /dev/stdout as nobody, who cannot do that."""
    return AS_NOBODY if os.geteuid() == 0 else []


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root needs setpriv")
@pytest.mark.parametrize("target", ["/dev/null", "/dev/stdout"])
def test_fleet_k8s_writes_through_dev_null_and_into_the_captured_stdout(target: str) -> None:
    args = [*K8S, "--keyring-configmap", "gpu-airgap-key"]
    command = [*_as_nobody(), *GPU_AIRGAP, *args, "--output", target]
    result = subprocess.run(command, capture_output=True, timeout=120, cwd="/", check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == ("" if target == "/dev/null" else run_cli(*args).stdout)
    assert _is_dev_null(Path("/dev/null")) and Path("/dev/stdout").is_symlink()


def test_fleet_k8s_writes_through_a_link_to_dev_null_and_keeps_the_link(null_link: Path) -> None:
    result = run_cli(*K8S, "--keyring-configmap", "gpu-airgap-key", "--output", str(null_link))
    assert result.exit_code == 0, result.stderr
    assert null_link.is_symlink() and _is_dev_null(null_link)


@pytest.mark.parametrize(
    "command",
    [
        [*K8S, "--keyring-configmap", "gpu-airgap-key"],
        ["fleet", "image", "--tools", "image", "--rootfs", "/"],
        ["bundle", "build", "--mirror", "/nonexistent", "--target", "deb/amd64", "--sign-key", "X"],
    ],
    ids=["fleet-k8s", "fleet-image", "bundle-build"],
)
def test_a_directory_as_output_is_a_usage_error_and_stays_a_directory(
    command: List[str], tmp_path: Path
) -> None:
    result = run_cli(*command, "--output", str(tmp_path))
    assert result.exit_code == ExitCode.USAGE, result.stderr
    assert f"--output {tmp_path} is a directory" in result.stderr and tmp_path.is_dir()


def _build(deb_mirror: Path, key: TestKey, output: str) -> List[str]:
    """``bundle build`` of the session mirror's 1.17.8 deb/amd64 into ``output``."""
    where = f"--mirror={deb_mirror} --version=1.17.8 --target=deb/amd64 --gnupghome={key.home}".split()
    return ["bundle", "build", *where, "--sign-key", key.fingerprint, "--output", output]


@pytest.fixture(scope="module")
def stdout_bundle(deb_mirror: Path, operator_key: TestKey) -> subprocess.CompletedProcess[bytes]:
    # /proc/self/fd/1 is what /dev/stdout links to; a regression cannot replace a file in /proc
    command = [*GPU_AIRGAP, *_build(deb_mirror, operator_key, "/proc/self/fd/1")]
    return subprocess.run(command, capture_output=True, timeout=600, check=False)


def test_bundle_build_to_stdout_streams_a_bundle_that_verifies(
    stdout_bundle: subprocess.CompletedProcess[bytes], operator_key: TestKey, tmp_path: Path
) -> None:
    assert stdout_bundle.returncode == 0, stdout_bundle.stderr
    assert b"wrote /proc/self/fd/1" in stdout_bundle.stderr  # the report goes to stderr, not into the bundle
    copy = tmp_path / "nvct.tar.zst"
    copy.write_bytes(stdout_bundle.stdout)
    verified = run_cli("bundle", "verify", str(copy), "--keyring", str(operator_key.public))
    assert verified.exit_code == 0, verified.stderr


def test_bundle_build_through_a_link_to_dev_null_keeps_the_link(
    deb_mirror: Path, operator_key: TestKey, null_link: Path
) -> None:
    result = run_cli(*_build(deb_mirror, operator_key, str(null_link)))
    assert result.exit_code == 0, result.stderr
    assert null_link.is_symlink() and _is_dev_null(null_link)
    assert not list(null_link.parent.glob(".discard*"))  # no temporary file left beside it


def test_configure_runtimeclass_refuses_a_device_as_its_journaled_output(tmp_path: Path) -> None:
    # its --output is a node path recorded for revert: a device cannot be backed up and put back
    device = tmp_path / "dev" / "null"
    device.parent.mkdir()
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("needs CAP_MKNOD to make /dev/null under a scratch root")
    result = run_cli("configure", "runtimeclass", "--root", str(tmp_path), "--output", "/dev/null")
    assert result.exit_code == ExitCode.USAGE, result.stderr
    assert "--output /dev/null is a device or a pipe; leave --output out" in result.stderr
    assert stat.S_ISCHR(device.lstat().st_mode) and not (tmp_path / "var").exists()
