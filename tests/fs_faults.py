"""Real filesystem faults for node tests: immutable files, read-only bind mounts, root without DAC override.

Each helper undoes what it did in a ``finally`` (the flag cleared, the mount unmounted), so pytest's
tmp_path cleanup and later tests never meet it. They need root (CI runs as root); callers skip otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

#: run a command as root that lacks CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH: file modes then bind root too,
#: so a 0555 directory is really read-only for it (what a non-root admin meets)
WITHOUT_DAC_OVERRIDE = [
    "setpriv",
    "--bounding-set",
    "-dac_override,-dac_read_search",
    "--inh-caps=-all",
    "--",
]
#: the real console entry point in a child process
GPU_AIRGAP = [sys.executable, "-m", "mirror"]


def is_root() -> bool:
    return os.geteuid() == 0


def supports_chattr(directory: Path) -> bool:
    """True when ``chattr +i`` works on files in ``directory`` (ext4, xfs, btrfs; not tmpfs or overlayfs)."""
    probe = directory / ".chattr-probe"
    probe.write_bytes(b"")
    try:
        done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False)
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True, check=False)
        return done.returncode == 0
    finally:
        probe.unlink()


@contextlib.contextmanager
def ext4_image(where: Path, size_mb: int = 32) -> Iterator[Path]:
    """A loop-mounted ext4 image at ``where`` (for machines whose tmp filesystem has no chattr)."""
    image = where.with_name(where.name + ".img")
    subprocess.run(["truncate", "-s", f"{size_mb}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    where.mkdir(parents=True, exist_ok=True)
    _mount_or_skip(["mount", "-o", "loop", str(image), str(where)])
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
        image.unlink()


@contextlib.contextmanager
def chattr_capable(tmp_path: Path) -> Iterator[Path]:
    """A directory where ``chattr +i`` works: ``tmp_path/node`` itself when it can, else an ext4 image there."""
    where = tmp_path / "node"
    where.mkdir()
    if supports_chattr(where):
        yield where
        return
    with ext4_image(where) as mounted:
        yield mounted


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """``chattr +i`` on ``paths`` for the block."""
    done: List[Path] = []
    try:
        for path in paths:
            subprocess.run(["chattr", "+i", str(path)], check=True)
            done.append(path)
        yield
    finally:
        for path in done:
            subprocess.run(["chattr", "-i", str(path)], check=False)


@contextlib.contextmanager
def read_only_mount(directory: Path) -> Iterator[None]:
    """Bind-mount ``directory`` onto itself and remount it read-only for the block."""
    _mount_or_skip(["mount", "--bind", str(directory), str(directory)])
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=False)


def _mount_or_skip(argv: List[str]) -> None:
    """Run ``mount``; a machine that may not mount at all (an unprivileged container) skips the test, saying why."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"{' '.join(argv[:3])} is not permitted here: {done.stderr.strip()}")


def have_tools(*names: str) -> bool:
    return all(shutil.which(name) for name in names)


def dpkg_killing_its_caller(directory: Path, action: str) -> Dict[str, str]:
    """An environment whose ``dpkg`` is the real one, wrapped to SIGKILL its caller once a run with ``action`` ends.

    :param action: the dpkg option that triggers the kill (``--install``, ``--remove``).
    """
    directory.mkdir()
    real = subprocess.run(
        ["sh", "-c", "command -v dpkg"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (directory / "dpkg").write_text(
        f'#!/bin/sh\n"{real}" "$@"; rc=$?\n'
        f'case " $* " in *" {action} "*) kill -{int(signal.SIGKILL)} $PPID;; esac\nexit $rc\n'
    )
    (directory / "dpkg").chmod(0o755)
    return {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}"}
