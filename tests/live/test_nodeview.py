"""The live tests' cleanup finds a stopped daemon's leftovers by mount namespace, and only its own.

The kernel gives a freed namespace's number to the next namespace made, so a name read from /proc
and used after the daemon exited matched another worker's fresh node view (CI: a podman view killed
while it came up). A pinned namespace keeps its number until it is let go.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.live.daemons import kill_namespace
from tests.live.nodeview import PinnedNamespace


@contextmanager
def _namespace_holder() -> Iterator[subprocess.Popen[bytes]]:
    holder = subprocess.Popen(["unshare", "--mount", "--", "sleep", "60"])
    try:
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _pinned(holder: subprocess.Popen[bytes]) -> PinnedNamespace:
    for _ in range(500):  # until unshare has made the namespace and exec'd sleep: pinned earlier, it is ours
        with open(f"/proc/{holder.pid}/comm") as comm:
            if comm.read().strip() == "sleep":
                pinned = PinnedNamespace.of(holder.pid)
                assert pinned is not None
                return pinned
        time.sleep(0.01)
    raise AssertionError("unshare did not exec sleep")


def test_a_pinned_namespace_keeps_its_name_after_its_processes_are_gone_so_a_new_one_is_not_killed() -> None:
    with _namespace_holder() as first:
        pinned = _pinned(first)
    assert pinned.pids() == []  # its only process is gone, and the namespace is still held
    with _namespace_holder() as second:
        fresh = _pinned(second)
        try:
            assert fresh.name != pinned.name  # the number was not handed on while pinned
            kill_namespace(pinned, timeout=1)  # a late cleanup of the first must spare the second
            assert second.poll() is None and fresh.pids() == [second.pid]
        finally:
            fresh.close()
