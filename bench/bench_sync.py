"""Benchmark: cold sync vs a raw parallel downloader, unthrottled sync vs curl + sha512sum, no-op re-sync.

Serves a local NVIDIA-like upstream (~25 MiB of incompressible payload per package) with nginx
on 127.0.0.1: one server block throttled to 20 MiB/s per connection (``limit_rate``, a WAN-like
link) and one unthrottled. The sync (deb amd64 + rpm x86_64, latest: 8 packages, ~200 MiB) is
compared with ``curl --parallel --parallel-max JOBS`` fetching the same URLs in the same run.

Targets: both ratios <= 1.3; no-op re-sync < 1 s. Run with ``make bench`` or
``.venv/bin/python bench/bench_sync.py [--jobs 4] [--payload-mb 25] [--repeat 2]``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness.nginx import start_nginx
from mirror.disk.trust import open_keyring
from mirror.model import PackageFormat
from mirror.sync import core as sync_lib
from mirror.sync.http import Downloader
from tests.upstream import cached_upstream

TARGETS = (sync_lib.RepoTarget(PackageFormat.DEB, "amd64"), sync_lib.RepoTarget(PackageFormat.RPM, "x86_64"))


def _best(repeat: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeat))


def _our_sync(upstream: str, public_key: Path, dest: Path, jobs: int) -> tuple[float, sync_lib.SyncResult]:
    options = sync_lib.SyncOptions(upstream=upstream, targets=TARGETS)
    started = time.perf_counter()
    with open_keyring([public_key]) as ring, Downloader(jobs=jobs) as downloader:
        result = sync_lib.sync(options, dest, downloader=downloader, loader=sync_lib.make_loader(ring))
    return time.perf_counter() - started, result


def _curl(urls: list[str], out: Path, jobs: int, *, hash_after: bool) -> float:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    argv = [
        "curl",
        "--no-progress-meter",
        "--fail",
        "--parallel",
        "--parallel-immediate",
        "--parallel-max",
        str(jobs),
    ]
    for i, url in enumerate(urls):
        argv += ["-o", str(out / f"{i}-{url.rsplit('/', 1)[-1]}"), url]
    started = time.perf_counter()
    subprocess.run(argv, check=True)
    if hash_after:
        subprocess.run(
            ["sha512sum", *sorted(str(p) for p in out.iterdir())], check=True, stdout=subprocess.DEVNULL
        )
    return time.perf_counter() - started


def main() -> int:
    """Run the benchmark and print figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--payload-mb", type=float, default=25)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    t0 = time.perf_counter()
    tree = cached_upstream(
        payload_mb=args.payload_mb,
        stable_versions=("1.20.1-1",),
        experimental_versions=("1.20.0~rc.1-1",),
        workers=2,
    )
    print(f"upstream: {tree.root} (ready in {time.perf_counter() - t0:.1f} s)")
    work = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    nginx = start_nginx(tree.root, work)
    slow_url, fast_url = nginx.throttled_url, nginx.fast_url
    failed = False
    try:
        with open_keyring([tree.public_key]) as ring, Downloader() as dl:
            planned = sync_lib.plan(
                sync_lib.SyncOptions(upstream=fast_url, targets=TARGETS),
                fetcher=dl.fetcher(),
                loader=sync_lib.make_loader(ring),
            )
        paths = [t.path(p) for t in planned for p in t.packages]
        total = sum(t.total_bytes for t in planned)
        print(
            f"set: {len(paths)} packages, {total / 1048576:.1f} MiB, jobs={args.jobs}, repeat={args.repeat} (best of)"
        )

        rows: list[tuple[str, float, float, float]] = []
        for label, url, hashed in (
            ("throttled 20 MiB/s/conn", slow_url, False),
            ("unthrottled loopback", fast_url, True),
        ):
            urls = [f"{url}/{p}" for p in paths]

            def base_run(urls: list[str] = urls, hashed: bool = hashed) -> float:
                return _curl(urls, work / "curl", args.jobs, hash_after=hashed)

            base = _best(args.repeat, base_run)

            def ours(url: str = url) -> float:
                dest = work / "mirror"
                shutil.rmtree(dest, ignore_errors=True)
                seconds, result = _our_sync(url, tree.public_key, dest, args.jobs)
                assert result.downloaded_bytes >= total, result.downloaded_bytes  # + yum filelists/other
                return seconds

            mine = _best(args.repeat, ours)
            rows.append((label, base, mine, mine / base))
        noop, result = _our_sync(fast_url, tree.public_key, work / "mirror", args.jobs)
        assert result.downloaded_bytes == 0
        cli = [
            str(Path(sys.executable).with_name("gpu-airgap")),
            "mirror",
            "sync",
            "--dest",
            str(work / "mirror"),
            "--upstream",
            fast_url,
            "--keyring",
            str(tree.public_key),
            "--quiet",
        ]
        started = time.perf_counter()
        subprocess.run(cli, check=True)
        noop_cli = time.perf_counter() - started

        baseline_names = {
            "throttled 20 MiB/s/conn": "curl --parallel",
            "unthrottled loopback": "curl --parallel + sha512sum",
        }
        print(f"{'case':<26} {'baseline':<28} {'base s':>8} {'sync s':>8} {'ratio':>6}  target")
        for label, base, mine, ratio in rows:
            ok = ratio <= 1.3
            failed |= not ok
            print(
                f"{label:<26} {baseline_names[label]:<28} {base:8.2f} {mine:8.2f} {ratio:6.2f}  <= 1.3 {'ok' if ok else 'MISSED'}"
            )
        print(
            f"{'no-op re-sync':<26} {'-':<28} {'':>8} {noop:8.3f} {'':>6}  < 1 s {'ok' if noop < 1 else 'MISSED'}"
        )
        print(
            f"{'no-op re-sync (CLI process)':<26} {'-':<28} {'':>8} {noop_cli:8.3f} {'':>6}  < 1 s {'ok' if noop_cli < 1 else 'MISSED'}"
        )
        failed |= noop >= 1 or noop_cli >= 1
    finally:
        nginx.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
