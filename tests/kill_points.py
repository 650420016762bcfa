"""``python -m tests.kill_points N ARGS...``: run ``gpu-airgap ARGS...`` and SIGKILL it right after its Nth change.

A change is one atomic file write (:func:`plumbing.fsutil.atomic_write`) or one file removal
(``os.unlink``): the points between which a crash can leave a run half done. The kill is a real
SIGKILL of this process at the point the test chooses, so a test can crash every step of a run in
turn. A run with fewer than N changes finishes normally.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any, Optional

from plumbing import fsutil


def main() -> None:
    limit = int(sys.argv[1])
    done = 0
    real_write, real_unlink = fsutil.atomic_write, os.unlink

    def changed() -> None:
        nonlocal done
        done += 1
        if done == limit:
            os.kill(os.getpid(), signal.SIGKILL)

    def atomic_write(path: Path, data: bytes, *, mode: Optional[int] = None) -> None:
        real_write(path, data, mode=mode)
        changed()

    def unlink(path: Any, *, dir_fd: Optional[int] = None) -> None:
        real_unlink(path, dir_fd=dir_fd)
        changed()

    # before anything imports atomic_write by name
    fsutil.atomic_write = atomic_write  # type: ignore[assignment]
    os.unlink = unlink  # type: ignore[assignment]
    sys.argv = ["gpu-airgap", *sys.argv[2:]]
    from mirror.cli import console

    console()


if __name__ == "__main__":
    main()
