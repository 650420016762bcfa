"""configure takes the node lock install uses: concurrent runs on one root lose nothing, a busy root is named.

Real ``gpu-airgap`` processes are started together through a barrier (each imports everything,
then blocks reading one byte from a shared pipe; the test writes one byte per process), so
their read-modify-write steps overlap as much as the machine allows; no sleeps.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Sequence

import pytest

from plumbing.errors import BusyError, ExitCode
from plumbing.nodelock import node_lock
from tests.cli_runner import run_cli
from tests.containerd_helpers import CONFIG, make_root
from tests.engine_oracle import containerd_effective

#: one gpu-airgap run that waits at the barrier (fd 0 of the pipe, passed as argv[1]) after its imports
BARRIER_RUN = (
    "import os, sys\n"
    "from mirror.cli import main\n"
    "import configure.cli, configure.distros.engine\n"
    "os.read(int(sys.argv[1]), 1)\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def run_together(runs: Sequence[Sequence[str]]) -> List[subprocess.CompletedProcess[str]]:
    """Start every ``gpu-airgap ARGV`` run, release them at once, and wait for all of them."""
    read_end, write_end = os.pipe()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", BARRIER_RUN, str(read_end), *argv],
            pass_fds=(read_end,),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in runs
    ]
    os.close(read_end)
    try:
        os.write(write_end, b"x" * len(children))
    finally:
        os.close(write_end)
    done = []
    for child, argv in zip(children, runs):
        stdout, stderr = child.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(list(argv), child.returncode, stdout, stderr))
    return done


@contextlib.contextmanager
def held_by_another_process(root: Path) -> Iterator[int]:
    """Another process holds ``root``'s node lock for the ``with`` block; yield its pid."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n",
            str(root),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder.pid
    finally:
        holder.communicate(timeout=30)  # closing its stdin lets it exit, releasing the lock


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd is not installed")
def test_concurrent_configure_runs_on_one_root_all_keep_their_runtime(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    original = (tmp_path / CONFIG).read_bytes()
    names = [f"gpu{i}" for i in range(6)]
    done = run_together(
        [["configure", "containerd", "--root", str(tmp_path), "--runtime-name", name] for name in names]
    )
    assert [run.returncode for run in done] == [0] * len(names), [run.stderr for run in done]
    effective = containerd_effective(tmp_path, "/" + CONFIG)  # what the real containerd loads
    assert effective.error == ""
    assert set(names) <= set(effective.runtimes)
    reverted = run_cli("configure", "revert", "--root", str(tmp_path))
    assert reverted.exit_code == 0, reverted.stderr
    assert (tmp_path / CONFIG).read_bytes() == original


@pytest.mark.slow
def test_configure_and_revert_at_once_leave_the_config_byte_exact_after_a_last_revert(tmp_path: Path) -> None:
    make_root(tmp_path, "config.toml.base")
    original = (tmp_path / CONFIG).read_bytes()
    root = str(tmp_path)
    for round_ in range(8):
        first = run_cli("configure", "containerd", "--root", root, "--runtime-name", "gpu-a")
        assert first.exit_code == 0, first.stderr
        done = run_together(
            [
                ["configure", "containerd", "--root", root, "--runtime-name", f"gpu-b{round_}"],
                ["configure", "revert", "--root", root],
                ["configure", "containerd", "--root", root, "--runtime-name", f"gpu-c{round_}"],
                ["configure", "revert", "--root", root],
            ]
        )
        for run in done:
            # A revert that comes after another one may find nothing left to revert; nothing else may fail.
            assert run.returncode == 0 or "nothing to revert" in run.stderr, run.stderr
        # Whatever the order, one more revert takes back what is left, to the very bytes.
        last = run_cli("configure", "revert", "--root", root)
        assert last.exit_code == 0 or "nothing to revert" in last.stderr, last.stderr
        assert (tmp_path / CONFIG).read_bytes() == original


def test_a_run_waits_for_the_holder_then_names_its_pid(tmp_path: Path) -> None:
    now = [0.0]
    slept: List[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    with (
        held_by_another_process(tmp_path) as pid,
        pytest.raises(BusyError) as refused,
        node_lock(tmp_path, wait=30, clock=lambda: now[0], sleep=sleep),
    ):
        pass
    assert str(refused.value) == (
        f"another gpu-airgap process (pid {pid}) is working on {tmp_path} and still held its lock after 30 s; "
        "try again when it finishes (or set GPU_AIRGAP_LOCK_WAIT to wait longer)"
    )
    assert sum(slept) == pytest.approx(30) and len(slept) > 1  # it tried again while waiting
    with node_lock(tmp_path, wait=0):  # free again once the holder is gone
        pass


def test_configure_on_a_busy_root_exits_8_naming_the_holder_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_root(tmp_path, "config.toml.base")
    before = (tmp_path / CONFIG).read_bytes()
    monkeypatch.setenv("GPU_AIRGAP_LOCK_WAIT", "0")
    with held_by_another_process(tmp_path) as pid:
        busy = run_cli("configure", "containerd", "--root", str(tmp_path))
        reverting = run_cli("configure", "revert", "--root", str(tmp_path))
    assert busy.exit_code == ExitCode.BUSY and reverting.exit_code == ExitCode.BUSY
    assert f"another gpu-airgap process (pid {pid}) is working on {tmp_path}" in busy.stderr
    assert (tmp_path / CONFIG).read_bytes() == before
    assert not (tmp_path / "var").exists()


def test_a_lock_wait_that_is_not_a_number_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_root(tmp_path, "config.toml.base")
    monkeypatch.setenv("GPU_AIRGAP_LOCK_WAIT", "soon")
    result = run_cli("configure", "containerd", "--root", str(tmp_path))
    assert result.exit_code == ExitCode.USAGE
    assert "GPU_AIRGAP_LOCK_WAIT must be a number of seconds (0 or more), not 'soon'" in result.stderr
