"""Run one tool once: timed, optionally killed half-way, with the server's view of what it fetched."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.harness.nginx import LogLine
from bench.harness.tools import Context, Tool
from mirror.disk.store import file_digest
from tests.upstream import UpstreamServer


class Server(Protocol):
    """A loopback server whose requests can be counted."""

    def clear_log(self) -> None:
        """Forget what was logged so far."""

    def read_log(self) -> list[LogLine]:
        """The requests logged since the last clear."""


class FaultServer:
    """tests/upstream's Python server as a :class:`Server` (for injected 503s)."""

    def __init__(self, server: UpstreamServer) -> None:
        """Wrap a started server."""
        self.server = server
        self._seen = 0

    def clear_log(self) -> None:
        self._seen = len(self.server.log)  # server.clear() would also drop the injected faults

    def read_log(self) -> list[LogLine]:
        return [
            LogLine(r.path, r.status, r.bytes_sent, r.range or "-") for r in self.server.log[self._seen :]
        ]


@dataclass
class Run:
    """What one run of a tool's command list did."""

    wall: float
    error: str = ""  #: empty when every command exited 0
    killed: bool = False
    log: list[LogLine] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """Body bytes the server sent."""
        return sum(line.bytes_sent for line in self.log)

    @property
    def requests(self) -> int:
        """Requests the server answered."""
        return len(self.log)


def _tree_bytes(root: Path) -> int:
    total = 0
    for top, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


def _error_line(*paths: Path) -> str:
    """The last line of ``paths`` that mentions an error or a failure, else the last line of the first non-empty one."""
    texts = [[ln.strip() for ln in p.read_text(errors="replace").splitlines() if ln.strip()] for p in paths]
    errors = [ln for lines in texts for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return (errors or next((lines for lines in texts if lines), [""]))[-1][:200]


def run_commands(
    cmds: Sequence[list[str]],
    ctx: Context,
    server: Server,
    *,
    kill_at_bytes: int | None = None,
    timeout: float = 600,
) -> Run:
    """Run ``cmds`` one after another in ``ctx.state``; stop at the first failure.

    :param kill_at_bytes: SIGKILL the last command's process group once ``ctx.state`` holds this
        many bytes (watched every 20 ms), like a crash or a power cut half-way.
    """
    env = {**os.environ, "TMPDIR": str(ctx.state / "tmp"), "GNUPGHOME": str(ctx.state / "gnupg")}
    (ctx.state / "tmp").mkdir(exist_ok=True)
    (ctx.state / "gnupg").mkdir(mode=0o700, exist_ok=True)
    out, err = ctx.state / "stdout.log", ctx.state / "stderr.log"
    server.clear_log()
    run = Run(0.0)
    started = time.perf_counter()
    for i, argv in enumerate(cmds):
        with open(out, "ab") as fo, open(err, "ab") as fe:
            proc = subprocess.Popen(
                argv, cwd=ctx.state, env=env, stdout=fo, stderr=fe, start_new_session=True
            )
            watch = kill_at_bytes is not None and i == len(cmds) - 1
            deadline = started + timeout
            while proc.poll() is None:
                if watch and kill_at_bytes is not None and _tree_bytes(ctx.state) >= kill_at_bytes:
                    os.killpg(proc.pid, signal.SIGKILL)
                    run.killed = True
                    break
                if time.perf_counter() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    run.error = f"timed out after {timeout:.0f} s"
                    break
                time.sleep(0.02)
            rc = proc.wait()
        if rc != 0 and not run.killed and not run.error:
            run.error = f"{Path(argv[0]).name} exit {rc}: {_error_line(err, out)}"
        if run.error or run.killed:
            break
    run.wall = time.perf_counter() - started
    time.sleep(0.2)  # nginx logs a request when its connection is done
    run.log = server.read_log()
    return run


def fresh_state(work: Path, tool: Tool, ctx: Context) -> Context:
    """An empty state directory for ``tool`` (old ones are removed) with its configuration written."""
    state = work / "state" / tool.name.replace(" ", "-")
    subprocess.run(["rm", "-rf", str(state)], check=True)
    state.mkdir(parents=True)
    new = Context(state, ctx.url, ctx.fmt, ctx.key, ctx.jobs, ctx.files)
    tool.setup(new)
    return new


def sha256(path: Path) -> str:
    """Hex sha256 of a file (the mirror's own streaming digest)."""
    return file_digest(path, "sha256")


def missing_packages(state: Path, expected: dict[str, str]) -> list[str]:
    """The expected package files (name -> sha256) not found byte-exact anywhere under ``state``.

    Matches by file-name suffix, so aptly's pool names (``<hash>_<file>``) count too.
    """
    found: set[str] = set()
    for top, _dirs, files in os.walk(state):
        for name in files:
            for want, digest in expected.items():
                if want not in found and name.endswith(want) and sha256(Path(top, name)) == digest:
                    found.add(want)
    return sorted(set(expected) - found)
