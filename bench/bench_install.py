"""Installer overhead and zipapp start time (issue 6, "Performance").

1. Overhead: install a real signed four-package bundle into a scratch dpkg root, timing the whole
   ``installer.install.install`` call and, at the :func:`plumbing.proc.run` chokepoint, the time
   spent inside dpkg / dpkg-query subprocesses. Overhead = total - package-manager time (it
   includes gpg verification, extraction, preflight logic, containerd config and state). Target < 1 s.
2. Zipapp start: ``python3 -I gpu-airgap-node.pyz --help`` with the zipapp ``bundle build`` ships
   (its wheels are vendored in mirror/bundle/data/wheels). Target < 0.5 s.
   Measured cold (first run: the zipapp extracts itself into its cache and Python compiles),
   warm (cached bytecode) and with no usable cache (imports straight from the zip).

Run: ``make bench`` or ``.venv/bin/python bench/bench_install.py``.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import plumbing.proc as proc
from installer.env import NodeEnv
from installer.install import install
from installer.plan import InstallOptions
from tests.gpgkeys import make_key
from tests.node_fixtures import CONTAINERD_CONFIG, build_target, seed_dpkg_root, write_signed_bundle
from tests.upstream import stop_agent

PACKAGE_MANAGERS = ("dpkg", "dpkg-query", "rpm")
RUNS = 5


class NoServices:
    def restart(self, unit: str) -> None:
        raise AssertionError("a scratch root never restarts engines")

    def is_active(self, unit: str) -> bool:
        return True

    def is_stopped(self, unit: str) -> bool:
        return False


def measure_overhead(work: Path) -> Dict[str, Any]:
    key = make_key(work / "gpg", "bench <bench@example.invalid>")
    target = build_target(work / "packages", "deb", "1.17.8-1", "amd64")
    bundle = write_signed_bundle(work / "bundle.tar", [target], key.home, key.fingerprint)
    spent: List[float] = []
    real_run = proc.run

    def timed_run(argv: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real_run(argv, **kwargs)
        finally:
            if Path(str(argv[0])).name in PACKAGE_MANAGERS:
                spent.append(time.perf_counter() - start)

    proc.run = timed_run
    totals, overheads, pm_times, pm_calls = [], [], [], []
    try:
        for i in range(RUNS):
            root = work / f"root-{i}"
            seed_dpkg_root(root)
            (root / "etc/containerd").mkdir(parents=True)
            (root / "etc/containerd/config.toml").write_bytes(CONTAINERD_CONFIG)
            spent.clear()
            start = time.perf_counter()
            result = install(bundle, key.public, InstallOptions(root=root), NodeEnv(services=NoServices()))
            total = time.perf_counter() - start
            assert result.outcome == "installed", result
            totals.append(total)
            pm_times.append(sum(spent))
            pm_calls.append(len(spent))
            overheads.append(total - sum(spent))
    finally:
        proc.run = real_run
        stop_agent(key.home)
    return {
        "runs": RUNS,
        "total_s_median": statistics.median(totals),
        "package_manager_s_median": statistics.median(pm_times),
        "package_manager_calls": pm_calls[0],
        "overhead_s_median": statistics.median(overheads),
        "overhead_s_max": max(overheads),
    }


def _find_python(name: str) -> str | None:
    """``name`` on PATH when it runs (pyenv shims may not), else a pyenv build of that version."""
    found = shutil.which(name)
    if found:
        # The interpreter itself, not a pyenv shim (a bash script that would add ~50 ms to each start).
        done = subprocess.run(
            [found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    candidates = sorted(Path.home().glob(f".pyenv/versions/{name.removeprefix('python')}*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


def _start_times(exe: str, pyz: Path, cache: Path, *, cold: bool) -> List[float]:
    """Wall times of ``exe -I pyz --help``; ``cold`` empties the extraction cache before each run."""
    env = {"PATH": "/usr/bin:/bin", "GPU_AIRGAP_NODE_CACHE": str(cache)}
    times = []
    for _ in range(RUNS):
        if cold:
            shutil.rmtree(cache, ignore_errors=True)
        start = time.perf_counter()
        done = subprocess.run([exe, "-I", str(pyz), "--help"], capture_output=True, env=env, cwd="/")
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode()[-300:])
    return times


def measure_zipapp(work: Path) -> Dict[str, Any]:
    """Cold (first run: extract + compile), warm (cached bytecode) and no-cache (straight from the zip)."""
    try:
        from mirror.bundle.zipapp import PYZ_NAME, build_zipapp
    except ImportError as exc:
        return {"skipped": f"no zipapp builder in this tree ({exc})"}
    try:
        data = build_zipapp(epoch=0)
    except Exception as exc:  # no wheel cache and no PyPI: report, do not fail the other figure
        return {"skipped": f"cannot build the zipapp here: {exc}"}
    pyz = work / PYZ_NAME
    pyz.write_bytes(data)
    shared = work / "shared-cache"  # group/world-writable: the zipapp refuses it and runs from the zip
    shared.mkdir()
    shared.chmod(0o777)
    results: Dict[str, Any] = {"size_bytes": len(data)}
    for python in ("python3", "python3.9"):
        exe = _find_python(python)
        if exe is None:
            results[python] = {"error": "not installed here"}
            continue
        try:
            cache = work / f"cache-{python}"
            row = {
                "cold": _start_times(exe, pyz, cache, cold=True),
                "warm": _start_times(exe, pyz, cache, cold=False),
                "zip": _start_times(exe, pyz, shared, cold=False),
            }
        except RuntimeError as exc:
            results[python] = {"error": str(exc)}
            continue
        results[python] = {f"{kind}_s_median": statistics.median(t) for kind, t in row.items()}
        results[python].update({f"{kind}_s_max": max(t) for kind, t in row.items()})
    return results


def measure_source_start() -> float:
    """Proxy for the zipapp: ``python -m installer --help`` from this tree with the venv's packages."""
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "installer", "--help"],
            capture_output=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-install.") as tmp:
        work = Path(tmp)
        overhead = measure_overhead(work)
        zipapp = measure_zipapp(work)
        source_start = measure_source_start()
    print(f"install of a 4-package bundle into a scratch dpkg root ({overhead['runs']} runs):")
    print(f"  total            {overhead['total_s_median'] * 1000:7.0f} ms (median)")
    print(
        f"  dpkg/dpkg-query  {overhead['package_manager_s_median'] * 1000:7.0f} ms in {overhead['package_manager_calls']} calls"
    )
    print(
        f"  overhead         {overhead['overhead_s_median'] * 1000:7.0f} ms median, {overhead['overhead_s_max'] * 1000:.0f} ms max (target < 1000 ms)"
    )
    if "skipped" in zipapp:
        print(f"zipapp start: skipped: {zipapp['skipped']}")
    else:
        print(
            f"zipapp start ({zipapp['size_bytes']} bytes) `python -I gpu-airgap-node.pyz --help`, median/max of {RUNS} (target < 500 ms):"
        )
        for python in ("python3", "python3.9"):
            row = zipapp.get(python, {})
            if "error" in row:
                print(f"  {python:10} failed: {row['error']}")
                continue
            figures = ", ".join(
                f"{label} {row[f'{kind}_s_median'] * 1000:.0f}/{row[f'{kind}_s_max'] * 1000:.0f} ms"
                for kind, label in (
                    ("cold", "cold (extract+compile)"),
                    ("warm", "warm"),
                    ("zip", "no cache (from the zip)"),
                )
            )
            print(f"  {python:10} {figures}")
    print(
        f"`python -m installer --help` from the source tree: {source_start * 1000:.0f} ms median (the zipapp's import path)"
    )
    ok = overhead["overhead_s_median"] < 1.0
    ok = ok and all(row.get("warm_s_median", 0) < 0.5 for row in zipapp.values() if isinstance(row, dict))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
