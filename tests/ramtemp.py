"""The session's temporary files in memory (tmpfs), where the machine has the room.

Most of the suite's system time went to its scratch files: unpacked booted node roots (393 MB and
10,000 files per boot), dpkg and rpm roots, mirrors and bundles, written and deleted again. On this
project's 2-CPU machines the root filesystem is ext4 mounted with ``discard`` on a virtual disk, and
the same test files cost 44 s of system CPU there against 8 s on tmpfs (tests/test_real_packages*,
node_install, mirror_sync together: 74 s against 36 s of wall time). So, unless told otherwise, the
session's ``--basetemp`` and ``TMPDIR`` go to a private directory on ``/dev/shm``, when it is a
tmpfs with room for :data:`NEEDS` bytes and that much memory is available; else everything stays
where pytest puts it. ``GPU_AIRGAP_TEST_TMP=disk`` (or an explicit ``--basetemp``) keeps it on disk,
for a look at a failed test's files after the session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from tests.live.nodeview import submounts

RAM = Path("/dev/shm")
#: pytest's --basetemp under the directory of :func:`start`
BASETEMP = "pt"
#: Twice the peak a whole ``make test`` reached on 2 workers (1.3 GB, sampled every 3 s).
NEEDS = 3 << 30


def is_tmpfs(path: Path) -> bool:
    """Whether ``path`` is the mount point of a tmpfs."""
    with open("/proc/self/mounts") as mounts:
        return any(
            fields[1] == str(path) and fields[2] == "tmpfs"
            for fields in (line.split() for line in mounts)
            if len(fields) > 2
        )


def _memory_available() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def has_room() -> bool:
    """Whether the session's files may go to :data:`RAM`."""
    if os.environ.get("GPU_AIRGAP_TEST_TMP") == "disk" or not is_tmpfs(RAM):
        return False
    return shutil.disk_usage(RAM).free >= NEEDS and _memory_available() >= NEEDS


def start() -> Path:
    """A directory on :data:`RAM` whose ``tmp`` is the session's (and its children's) ``TMPDIR``.

    Its name is short (``/dev/shm/gat.XXXXXXXX``, and :data:`BASETEMP` under it), no longer than
    pytest's own ``/tmp/pytest-of-root/pytest-N``: the tests put unix sockets (containerd's,
    ssh's ControlPath, gpg-agent's) under their tmp_path, and a socket's path has 107 bytes at most.

    ``tmp`` is world-writable and sticky like ``/tmp``: the rootless podman tests run as another
    user, who inherits ``TMPDIR``.
    """
    base = Path(tempfile.mkdtemp(prefix="gat.", dir=RAM))
    base.chmod(0o755)
    tmp = base / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None  # read TMPDIR again
    return base


def finish(base: Path) -> Optional[str]:
    """Remove ``base``; or, if something is still mounted under it, leave it and say what."""
    inside = submounts(str(base))
    if inside:
        return f"{base} was left in place: {', '.join(inside)} is still mounted there"
    shutil.rmtree(base, ignore_errors=True)
    return None
