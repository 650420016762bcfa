"""A node file that is not a regular file (a FIFO planted at config.toml) is refused at once, never waited on.

Opening a FIFO for reading blocks until a writer comes; before every reader went through
:func:`plumbing.fsutil.read_regular`, ``configure`` and ``status`` hung there for good.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List

import pytest

from plumbing.errors import ExitCode
from tests.fs_faults import GPU_AIRGAP


@pytest.mark.parametrize(
    ("argv", "node_path"),
    [
        (["configure", "containerd"], "etc/containerd/config.toml"),
        (["configure", "docker"], "etc/docker/daemon.json"),
        (["status"], "var/lib/gpu-airgap/state.json"),
    ],
)
def test_a_fifo_where_a_node_file_belongs_is_refused_promptly_naming_the_file_and_its_type(
    tmp_path: Path, argv: List[str], node_path: str
) -> None:
    fifo = tmp_path / node_path
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    # A hang shows up as TimeoutExpired: the command must answer without anyone writing to the FIFO.
    done = subprocess.run(
        [*GPU_AIRGAP, *argv, "--root", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert f"{fifo}: is a FIFO (named pipe), not a regular file" in done.stderr
    assert "Traceback" not in done.stderr
