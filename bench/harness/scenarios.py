"""The scenarios of bench_peers; each returns one :class:`Row` per tool (and format, and link).

cold (throttled and unthrottled), no-op re-sync, a new upstream release, an interrupted sync
re-run, and injected 503s. Wall times are medians over ``repeat`` runs; bytes and requests are
those of the median run, as the server logged them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness.runs import FaultServer, Run, Server, fresh_state, missing_packages, run_commands
from bench.harness.tools import Aria2, Context, Tool, tools_for
from bench.harness.upstream import DEB_REPO, NEW, OLD, RPM_REPO, Sites, serve
from tests.upstream import Fault, UpstreamServer


@dataclass
class Row:
    """One tool in one scenario."""

    scenario: str
    link: str
    fmt: str
    tool: str
    peer: bool
    raw: bool  #: the physical baseline of its group
    wall: float | None  #: median seconds (None: could not run)
    mib: float = 0.0
    requests: int = 0
    complete: bool = False  #: all four packages of the release, byte-exact
    signature: str = ""
    recovered: str = ""
    error: str = ""
    note: str = ""
    walls: list[float] = field(default_factory=list)


@dataclass
class Bench:
    """Everything the scenarios share."""

    work: Path
    sites: Sites
    served: Path  #: the symlink nginx serves
    nginx: Server
    urls: dict[str, str]  #: link label -> base URL
    jobs: int
    repeat: int
    signature: dict[str, str] = field(default_factory=dict)  #: "tool/fmt" -> verdict of the wrong-key probe
    cold_bytes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    tools: tuple[str, ...] = ()  #: only these tools (all when empty)

    def ctx(
        self, fmt: str, url: str, site: Path, version: str, key: Path | None = None, jobs: int = 0
    ) -> Context:
        """A context for ``fmt`` against ``url`` (the raw list comes from ``site``)."""
        key = key or self.sites.tree.public_key
        return Context(self.work, url, fmt, key, jobs or self.jobs, self.sites.raw_files(fmt, site, version))


THROTTLED, FAST = "20 MiB/s per conn", "unthrottled"


def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.wall)[len(runs) // 2]


def _row(b: Bench, scenario: str, link: str, fmt: str, tool: Tool, runs: list[Run], complete: bool) -> Row:
    med = _median_run(runs)
    error = next((r.error for r in runs if r.error), "")
    return Row(
        scenario,
        link,
        fmt,
        tool.name,
        tool.peer,
        isinstance(tool, Aria2),
        statistics.median(r.wall for r in runs) if not error else None,
        mib=med.bytes / 2**20,
        requests=med.requests,
        complete=complete and not error,
        signature=b.signature.get(f"{tool.name}/{fmt}", "" if tool.takes_key else "no (no key option)"),
        error=error,
        walls=[round(r.wall, 3) for r in runs],
    )


def cold(b: Bench, link: str) -> list[Row]:
    """First sync of release OLD into an empty state."""
    serve(b.served, b.sites.site_a)
    rows = []
    for fmt in ("deb", "rpm"):
        hashing = link == FAST and (not b.tools or "aria2c" in b.tools)
        tools = tools_for(fmt, b.tools) + ([Aria2(sha512=True)] if hashing else [])
        for tool in tools:
            runs, complete = [], True
            for _ in range(b.repeat):
                ctx = fresh_state(b.work, tool, b.ctx(fmt, b.urls[link], b.sites.site_a, OLD))
                runs.append(run_commands(tool.cold(ctx), ctx, b.nginx))
                complete &= not missing_packages(ctx.state, b.sites.release_files(fmt, OLD))
            b.cold_bytes[(link, fmt, tool.name)] = _median_run(runs).bytes
            rows.append(_row(b, "cold sync", link, fmt, tool, runs, complete))
    return rows


def noop(b: Bench, link: str = THROTTLED) -> list[Row]:
    """A re-sync with nothing new upstream."""
    serve(b.served, b.sites.site_a)
    rows = []
    for fmt in ("deb", "rpm"):
        for tool in tools_for(fmt, b.tools):
            ctx = fresh_state(b.work, tool, b.ctx(fmt, b.urls[link], b.sites.site_a, OLD))
            first = run_commands(tool.cold(ctx), ctx, b.nginx)
            runs = (
                [first]
                if first.error
                else [run_commands(tool.resync(ctx), ctx, b.nginx) for _ in range(b.repeat)]
            )
            complete = not missing_packages(ctx.state, b.sites.release_files(fmt, OLD))
            rows.append(_row(b, "no-op re-sync", link, fmt, tool, runs, complete))
    return rows


def new_release(b: Bench, link: str = THROTTLED) -> list[Row]:
    """Cold sync of OLD (not timed), then NEW appears upstream, then the timed re-sync."""
    rows = []
    for fmt in ("deb", "rpm"):
        for tool in tools_for(fmt, b.tools):
            runs, complete = [], True
            for _ in range(b.repeat):
                serve(b.served, b.sites.site_a)
                ctx = fresh_state(b.work, tool, b.ctx(fmt, b.urls[link], b.sites.site_a, OLD))
                first = run_commands(tool.cold(ctx), ctx, b.nginx)
                serve(b.served, b.sites.tree.root)
                if isinstance(tool, Aria2):  # the raw downloader is told the new release's files
                    tool.write_urls(b.ctx(fmt, ctx.url, b.sites.tree.root, NEW).files, ctx)
                runs.append(first if first.error else run_commands(tool.resync(ctx), ctx, b.nginx))
                complete &= not missing_packages(ctx.state, b.sites.release_files(fmt, NEW))
            rows.append(_row(b, "new release", link, fmt, tool, runs, complete))
    serve(b.served, b.sites.site_a)
    return rows


def _completed(run: Run, sizes: dict[str, int]) -> set[str]:
    """Package files the server sent whole during ``run``."""
    return {
        ln.path
        for ln in run.log
        if ln.status == 200 and ln.bytes_sent == sizes.get(ln.path, -1) and ln.path.endswith((".deb", ".rpm"))
    }


def _refetched(first: Run, second: Run, sizes: dict[str, int]) -> list[str]:
    """Package files sent whole in ``first`` that ``second`` downloaded again from byte 0."""
    again = {ln.path for ln in second.log if ln.status == 200 and ln.bytes_sent > 0}
    return sorted(_completed(first, sizes) & again)


def interrupted(b: Bench, link: str = THROTTLED) -> list[Row]:
    """A cold sync SIGKILLed when 60 % of its bytes are on disk, then re-run.

    Runs with half the usual parallel downloads, so at the kill some packages are complete and
    others are partial: the re-run shows whether a tool keeps the first and resumes the second.
    """
    serve(b.served, b.sites.site_a)
    site = b.sites.site_a
    rows = []
    for fmt in ("deb", "rpm"):
        repo = site / (DEB_REPO if fmt == "deb" else RPM_REPO)
        sizes = {
            "/" + p.relative_to(site).as_posix(): p.stat().st_size for p in repo.rglob("*") if p.is_file()
        }
        for tool in tools_for(fmt, b.tools):
            cold_bytes = b.cold_bytes.get((link, fmt, tool.name), 0)
            runs, complete, extra, refetched, notes, done = [], True, [], set(), set(), []
            jobs = max(1, b.jobs // 2)
            for _ in range(b.repeat):
                ctx = fresh_state(b.work, tool, b.ctx(fmt, b.urls[link], site, OLD, jobs=jobs))
                first = run_commands(tool.cold(ctx), ctx, b.nginx, kill_at_bytes=cold_bytes * 6 // 10)
                done.append(len(_completed(first, sizes)))
                if not first.killed:
                    notes.add("finished before the kill" if not first.error else first.error)
                second = run_commands(tool.resync(ctx), ctx, b.nginx)
                second.log = first.log + second.log  # bytes/requests of both halves
                runs.append(second)
                complete &= not missing_packages(ctx.state, b.sites.release_files(fmt, OLD))
                extra.append(second.bytes - cold_bytes)
                refetched.update(_refetched(first, Run(0, log=second.log[len(first.log) :]), sizes))
            row = _row(b, "interrupted + re-run", link, fmt, tool, runs, complete)
            row.note = (
                f"jobs={jobs}; wall: the re-run; MiB/requests: both runs, {statistics.median(extra) / 2**20:.1f} MiB "
                f"more than a cold sync; package files complete at the kill: {statistics.median(done):g}"
                + "".join(f"; {n}" for n in sorted(notes))
            )
            row.recovered = (
                "yes"
                if complete and not refetched
                else "complete, but re-fetched " + ", ".join(p.rsplit("/", 1)[-1] for p in sorted(refetched))
                if complete
                else "no"
            )
            rows.append(row)
    return rows


def faults(b: Bench, server: UpstreamServer) -> list[Row]:
    """A cold sync against the Python fault server answering 503 to the first request of every file."""
    site = b.sites.site_a
    wrapped = FaultServer(server)
    rows = []
    for fmt in ("deb", "rpm"):
        repo = site / (DEB_REPO if fmt == "deb" else RPM_REPO)
        files = [p.relative_to(site).as_posix() for p in repo.rglob("*") if p.is_file()]
        for tool in tools_for(fmt, b.tools):
            runs, complete = [], True
            for _ in range(b.repeat):
                ctx = fresh_state(b.work, tool, b.ctx(fmt, server.url, site, OLD))
                server.clear()
                for f in files:
                    server.inject(f, Fault.fail_first(1))
                runs.append(run_commands(tool.cold(ctx), ctx, wrapped))
                complete &= not missing_packages(ctx.state, b.sites.release_files(fmt, OLD))
            row = _row(b, "injected 503s", "python fault server", fmt, tool, runs, complete)
            row.note = f"503s answered: {sum(1 for ln in _median_run(runs).log if ln.status == 503)}"
            rows.append(row)
    return rows


def probe_signatures(b: Bench, wrong_key: Path) -> None:
    """Run each tool once trusting the wrong key: a tool that verifies upstream must refuse."""
    serve(b.served, b.sites.site_a)
    for fmt in ("deb", "rpm"):
        for tool in tools_for(fmt, b.tools):
            if not tool.takes_key:
                b.signature[f"{tool.name}/{fmt}"] = "no (no key option)"
                continue
            ctx = fresh_state(b.work, tool, b.ctx(fmt, b.urls[FAST], b.sites.site_a, OLD, key=wrong_key))
            run = run_commands(tool.cold(ctx), ctx, b.nginx)
            synced = not missing_packages(ctx.state, b.sites.release_files(fmt, OLD))
            verdict = "NO (wrong key accepted)" if synced else "yes (wrong key refused)"
            if not synced and not run.error:
                verdict = "yes (wrong key refused, but exit 0)"
            b.signature[f"{tool.name}/{fmt}"] = verdict
