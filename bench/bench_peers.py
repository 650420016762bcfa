"""Benchmark: `gpu-airgap mirror sync` side by side with aptly, apt-mirror, dnf reposync and aria2c.

One run, one local upstream (tests/upstream, ~25 MiB of incompressible payload per package,
releases 1.20.0 and, appearing later, 1.20.1), served by nginx on 127.0.0.1 both throttled
(20 MiB/s per connection) and unthrottled, and by tests/upstream's Python server for injected 503s.

Scenarios: cold sync (deb amd64, rpm x86_64) on both links; no-op re-sync; re-sync after a new
release appears; a sync SIGKILLed half-way then re-run; a cold sync when every file's first request
gets a 503. Each tool is first run trusting a wrong key, to show whether it verifies upstream.
The bundle figures of bench_bundle.py (build/verify vs tar --zstd / sha256sum) are part of the run.

Writes bench/results/peers-<date>.md and .json and prints the Markdown.
Usage: python bench/bench_peers.py [--repeat 3] [--jobs 4] [--payload-mb 25] [--bundle-sizes 50,200]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import report, scenarios  # noqa: E402
from bench.harness.nginx import start_nginx  # noqa: E402
from bench.harness.scenarios import FAST, THROTTLED, Bench, Row  # noqa: E402
from bench.harness.upstream import NEW, OLD, prepare_sites, serve  # noqa: E402
from tests.upstream import UpstreamServer, make_wrong_key, stop_agent  # noqa: E402

SCENARIOS = ("cold", "noop", "new", "interrupted", "503")


def run_scenarios(
    work: Path,
    *,
    payload_mb: float,
    jobs: int,
    repeat: int,
    only: tuple[str, ...],
    tools: tuple[str, ...] = (),
) -> list[Row]:
    """Prepare the upstreams and servers under ``work`` and run the chosen scenarios."""
    t0 = time.perf_counter()
    sites = prepare_sites(work, payload_mb)
    print(f"upstream ready in {time.perf_counter() - t0:.1f} s: {sites.tree.root}", file=sys.stderr)
    wrong = make_wrong_key(work / "wrong-gnupg")
    (work / "wrong.asc").write_bytes(wrong.public_key_armored())
    stop_agent(wrong.gnupghome)
    served = work / "served"
    serve(served, sites.site_a)
    (work / "nginx").mkdir()
    nginx = start_nginx(served, work / "nginx")
    b = Bench(
        work,
        sites,
        served,
        nginx,
        {THROTTLED: nginx.throttled_url, FAST: nginx.fast_url},
        jobs,
        repeat,
        tools=tools,
    )
    rows: list[Row] = []
    try:
        t = time.perf_counter()
        scenarios.probe_signatures(b, work / "wrong.asc")
        print(f"signature probe: {time.perf_counter() - t:.1f} s", file=sys.stderr)
        steps: list[tuple[str, Callable[[], list[Row]]]] = []
        if "cold" in only or "interrupted" in only:  # the interrupted run is killed at half the cold bytes
            steps += [("cold, throttled", lambda: scenarios.cold(b, THROTTLED))]
        if "cold" in only:
            steps += [("cold, unthrottled", lambda: scenarios.cold(b, FAST))]
        if "noop" in only:
            steps += [("no-op", lambda: scenarios.noop(b))]
        if "new" in only:
            steps += [("new release", lambda: scenarios.new_release(b))]
        if "interrupted" in only:
            steps += [("interrupted", lambda: scenarios.interrupted(b))]
        for label, step in steps:
            t = time.perf_counter()
            rows += step()
            print(f"{label}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
        if "503" in only:
            t = time.perf_counter()
            with UpstreamServer(sites.site_a) as server:
                rows += scenarios.faults(b, server)
            print(f"injected 503s: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    finally:
        nginx.stop()
    return rows


def main() -> int:
    """Run everything, write the report, print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per tool and scenario; the median is reported"
    )
    parser.add_argument("--jobs", type=int, default=4, help="parallel downloads, the same for every tool")
    parser.add_argument("--payload-mb", type=float, default=25)
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated subset of {','.join(SCENARIOS)}"
    )
    parser.add_argument("--tools", default="", help="comma-separated tool names (default: all)")
    parser.add_argument("--bundle-sizes", default="50,200", help="bench_bundle sizes in MB; empty to skip")
    parser.add_argument("--bundle-rounds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    try:
        rows = run_scenarios(
            work,
            payload_mb=args.payload_mb,
            jobs=args.jobs,
            repeat=args.repeat,
            only=tuple(args.scenarios.split(",")),
            tools=tuple(filter(None, args.tools.split(","))),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bundle: list[dict[str, float]] = []
    bundle_lines = ["(skipped)"]
    if args.bundle_sizes:
        from bench import bench_bundle

        bundle = bench_bundle.run([int(s) for s in args.bundle_sizes.split(",")], args.bundle_rounds)
        bundle_lines, ok = bench_bundle.summary(bundle)
        bundle_lines.append("bundle targets met" if ok else "bundle: MISSED at least one target")
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": report.machine(),
        "payload_mb": args.payload_mb,
        "releases": f"{OLD}, then {NEW}",
        "jobs": args.jobs,
        "repeat": args.repeat,
        "seconds": round(time.perf_counter() - started, 1),
        "targets": report.targets(rows),
    }
    md = report.write(args.results, rows, meta, bundle, bundle_lines)
    print(md.read_text(encoding="utf-8"))
    print(f"written: {md} and {md.with_suffix('.json')} ({meta['seconds']} s)", file=sys.stderr)
    return 0  # a missed target is a finding, not a failure of `make bench`


if __name__ == "__main__":
    sys.exit(main())
