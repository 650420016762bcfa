"""Installing NVIDIA's real 1.20.0 packages: ``gpu-airgap install`` vs ``apt-get install`` vs raw ``dpkg -i`` (issue 13).

Each method installs the same four .debs (NVIDIA's ``nvidia-container-toolkit`` and ``-base`` built from
source, stand-in ``libnvidia-container1``/``-tools`` with the real fields) into its own fresh copy of the
cached minimal Debian root (``tests/test_node_debootstrap.py``), which also has a containerd config:

- ``dpkg``: ``dpkg --root=ROOT -i`` of the four files, what installing them at all costs (the floor);
- ``gpu-airgap``: ``python3 -I -S gpu-airgap-node.pyz install BUNDLE --keyring KEY --root ROOT --runtime
  containerd``, what install.sh runs on a node (warm zipapp cache): bundle signature and digests,
  extraction, preflight, dpkg, containerd registration, state; also through the venv's console script;
- ``apt-get``: ``chroot ROOT apt-get install`` of the four names from a local file repo (``[trusted=yes]``,
  so apt checks no signature; its ``apt-get update`` is done beforehand and not timed).

The methods take turns, ``RUNS`` rounds; figures are medians. Then one in-process install is timed
phase by phase (at the :mod:`installer.install` seams and the ``proc.run`` chokepoint) to say where
gpu-airgap's own time goes. Needs root and the debootstrap cache (``make pytest`` prepares it).

Run: ``make bench`` or ``sudo .venv/bin/python bench/bench_real_install.py [--runs N]`` (default 3).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, List, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import installer.install as install_mod
import installer.plan as plan_mod
import plumbing.proc as proc
from installer.env import NodeEnv
from tests.cli_runner import install_argv, run_bundle_build, run_mirror_sync
from tests.gpgkeys import TestKey, make_key
from tests.test_node_debootstrap import _missing_prerequisite, cached_debian_tarball
from tests.upstream import NVIDIA_BUILD, Prebuilt, UpstreamServer, real_upstream, stop_agent

RUNS = 3
TOOLKIT = (
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
)
CONTAINERD = Path(__file__).resolve().parent.parent / "tests/data/fixtures/containerd/config.toml.base"
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TARGET = 1.2


def prepare(work: Path) -> Dict[str, Any]:
    """The bundle (synced and built like an operator would), its four .debs, the zipapp and the root tarball."""
    tree = real_upstream()
    key = make_key(work / "gpg", "bench operator <bench@example.invalid>")
    with UpstreamServer(tree.root) as server:
        done = run_mirror_sync(work / "mirror", server.url, tree.public_key, "--quiet", version="1.20.0")
    assert done.exit_code == 0, done.stderr
    bundle = work / "bundle.tar.zst"
    done = run_bundle_build(work / "mirror", key, bundle, version="1.20.0")
    assert done.exit_code == 0, done.stderr
    stop_agent(tree.gnupghome)
    debs = [next((work / "mirror").rglob(f"{name}_1.20.0-1_amd64.deb")) for name in TOOLKIT]
    subprocess.run(["tar", "-xf", str(bundle), "gpu-airgap-node.pyz"], cwd=work, check=True)
    # A private copy: the shared cache keeps one root per key and other test runs may replace it meanwhile.
    tarball = Path(shutil.copy(cached_debian_tarball(work / "debootstrap"), work / "debian.tar.zst"))
    return {
        "key": key,
        "bundle": bundle,
        "debs": debs,
        "pyz": work / "gpu-airgap-node.pyz",
        "tarball": tarball,
    }


def fresh_root(tarball: Path, root: Path) -> Path:
    """An identical fresh node: the cached Debian root plus containerd's config."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "-I", "zstd", "-C", str(root), "-xf", str(tarball)], check=True
    )
    (root / "etc/containerd").mkdir(parents=True)
    shutil.copyfile(CONTAINERD, root / "etc/containerd/config.toml")
    return root


#: CPU seconds (user + system) of the last :func:`timed` command and its children: steadier than wall
#: time on a busy machine, where a CPU-bound Python start-up waits longer than an fsync-bound dpkg.
LAST_CPU = [0.0]


def timed(argv: List[str], env: Dict[str, str] | None = None) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU[0] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... failed: {done.stderr.decode()[-500:]}")
    return elapsed


def run_dpkg(inputs: Dict[str, Any], root: Path) -> float:
    return timed(
        ["dpkg", f"--root={root}", "--install", *map(str, inputs["debs"])], {**os.environ, "PATH": NODE_PATH}
    )


def run_zipapp(inputs: Dict[str, Any], root: Path) -> float:
    key: TestKey = inputs["key"]
    env = {
        "PATH": NODE_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "GPU_AIRGAP_NODE_CACHE": str(inputs["pyz"].parent / "node-cache"),
    }
    return timed(
        [
            "/usr/bin/python3",
            "-I",
            "-S",
            str(inputs["pyz"]),
            *install_argv(inputs["bundle"], key, root),
            "--runtime",
            "containerd",
        ],
        env,
    )


def run_console(inputs: Dict[str, Any], root: Path) -> float:
    key: TestKey = inputs["key"]
    script = str(Path(sys.executable).with_name("gpu-airgap"))
    return timed(
        [
            script,
            *install_argv(inputs["bundle"], key, root),
            "--runtime",
            "containerd",
        ],
        {**os.environ, "PATH": NODE_PATH},
    )


def setup_apt(inputs: Dict[str, Any], root: Path) -> None:
    """A local file repo inside the root, the only apt source, indexed by ``apt-get update`` (untimed)."""
    repo = root / "var/cache/bench-repo"
    repo.mkdir(parents=True)
    for deb in inputs["debs"]:
        shutil.copy(deb, repo)
    packages = subprocess.run(
        ["dpkg-scanpackages", "-m", "."], cwd=repo, capture_output=True, check=True
    ).stdout
    (repo / "Packages").write_bytes(packages)
    (root / "etc/apt/sources.list").write_text("deb [trusted=yes] file:/var/cache/bench-repo ./\n")
    timed(["chroot", str(root), "apt-get", "update", "-qq"], {**os.environ, "PATH": NODE_PATH})


def run_apt(inputs: Dict[str, Any], root: Path) -> float:
    env = {**os.environ, "PATH": NODE_PATH, "DEBIAN_FRONTEND": "noninteractive"}
    return timed(
        ["chroot", str(root), "apt-get", "install", "-y", "-qq", "--no-install-recommends", *TOOLKIT], env
    )


METHODS: Dict[str, Callable[[Dict[str, Any], Path], float]] = {
    "dpkg": run_dpkg,
    "gpu-airgap": run_zipapp,
    "gpu-airgap (venv)": run_console,
    "apt-get": run_apt,
}


def compare(inputs: Dict[str, Any], work: Path) -> Dict[str, List[float]]:
    """Wall seconds per method (``NAME``) and CPU seconds (``NAME cpu``), ``RUNS`` rounds."""
    times: Dict[str, List[float]] = defaultdict(list)
    subprocess.run(
        ["/usr/bin/python3", "-I", "-S", str(inputs["pyz"]), "--help"],
        capture_output=True,
        check=True,
        env={"PATH": NODE_PATH, "GPU_AIRGAP_NODE_CACHE": str(inputs["pyz"].parent / "node-cache")},
    )  # warm cache
    for _ in range(RUNS):
        for name, method in METHODS.items():
            root = fresh_root(inputs["tarball"], work / "root")
            if name == "apt-get":
                setup_apt(inputs, root)
            subprocess.run(["sync"], check=True)
            times[name].append(method(inputs, root))
            times[f"{name} cpu"].append(LAST_CPU[0])
    shutil.rmtree(work / "root", ignore_errors=True)
    return times


def breakdown(inputs: Dict[str, Any], work: Path) -> Dict[str, float]:
    """One in-process install, timed at the installer's seams and at the subprocess chokepoint."""
    phases: Dict[str, float] = defaultdict(float)
    calls: Dict[str, int] = defaultdict(int)

    def wrap(owner: Any, name: str, label: str) -> Callable[[], None]:
        real = getattr(owner, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                phases[label] += time.perf_counter() - start

        setattr(owner, name, timed_call)
        return lambda: setattr(owner, name, real)

    real_run = proc.run

    def counted_run(argv: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real_run(argv, **kwargs)
        finally:
            program = Path(str(argv[0])).name
            phases[f"subprocess {program}"] += time.perf_counter() - start
            calls[program] += 1

    root = fresh_root(inputs["tarball"], work / "root")
    env = NodeEnv()
    undo = [
        wrap(install_mod, "plan_install", "plan (detect, preflight, engine plans)"),
        wrap(plan_mod, "_preflight", "  preflight"),
        wrap(install_mod, "_install_packages", "install packages"),
        wrap(install_mod, "_register", "engine registration (write)"),
        wrap(install_mod, "save_state", "state"),
        wrap(plan_mod, "load_state", "state"),
        wrap(env, "opener", "verify + extract"),
        wrap(env, "detect", "  detect node"),
    ]
    proc.run = counted_run
    try:
        start = time.perf_counter()
        key: TestKey = inputs["key"]
        result = install_mod.install(
            inputs["bundle"], key.public, plan_mod.InstallOptions(root=root, runtime="containerd"), env
        )
        phases["total (in-process)"] = time.perf_counter() - start
        assert result.outcome == "installed", result
    finally:
        proc.run = real_run
        for restore in undo:
            restore()
        shutil.rmtree(root, ignore_errors=True)
    start_times = [
        timed(
            ["/usr/bin/python3", "-I", "-S", str(inputs["pyz"]), "--help"],
            {"PATH": NODE_PATH, "GPU_AIRGAP_NODE_CACHE": str(inputs["pyz"].parent / "node-cache")},
        )
        for _ in range(5)
    ]
    phases["python start-up (zipapp --help, warm)"] = statistics.median(start_times)
    phases.update({f"calls {k}": float(v) for k, v in calls.items()})
    return dict(phases)


T = TypeVar("T")


def with_prepared_inputs(name: str, measure: Callable[[Dict[str, Any], Path], T]) -> T | None:
    """The frame every real-install bench shares: ``--runs N``, a skip line (and None) when a prerequisite
    is missing, else ``measure(inputs, work)`` on :func:`prepare`'s inputs in a scratch directory."""
    global RUNS
    if len(sys.argv) > 2 and sys.argv[1] == "--runs":
        RUNS = int(sys.argv[2])
    reason = _missing_prerequisite() or Prebuilt(NVIDIA_BUILD).missing_reason()
    if reason:
        print(f"{name}: skipped: {reason}")
        return None
    with tempfile.TemporaryDirectory(prefix=f"{name.replace('_', '-')}.") as tmp:
        work = Path(tmp)
        inputs = prepare(work)
        try:
            return measure(inputs, work)
        finally:
            stop_agent(inputs["key"].home)


def main() -> int:
    measured = with_prepared_inputs(
        "bench_real_install", lambda inputs, work: (compare(inputs, work), breakdown(inputs, work))
    )
    if measured is None:
        return 0
    times, phases = measured
    floor = statistics.median(times["dpkg"])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"install of NVIDIA's 1.20.0 packages (4 .debs, 7.6 MB) into a fresh minimal Debian root, median of {RUNS} "
        f"({os.cpu_count()} CPUs, load average {load} at the end):"
    )
    cpu_floor = statistics.median(times["dpkg cpu"])
    for name in METHODS:
        median, cpu = statistics.median(times[name]), statistics.median(times[f"{name} cpu"])
        print(
            f"  {name:18} {median:6.2f} s  {median / floor:5.2f}x raw dpkg   (runs: {', '.join(f'{v:.2f}' for v in times[name])});"
            f"  CPU {cpu:5.2f} s, {cpu / cpu_floor:4.2f}x dpkg's"
        )
    ours = statistics.median(times["gpu-airgap"]) / floor
    # Each round runs the methods back to back, so a round's ratio is less exposed to the load drifting.
    per_round = [g / d for g, d in zip(times["gpu-airgap"], times["dpkg"])]
    print(
        f"  gpu-airgap / dpkg per round: {', '.join(f'{r:.2f}' for r in per_round)} (median {statistics.median(per_round):.2f}x)"
    )
    print(
        f"  gpu-airgap / apt-get: {statistics.median(times['gpu-airgap']) / statistics.median(times['apt-get']):.2f}x; "
        f"target <= {TARGET}x raw dpkg: {'met' if ours <= TARGET else 'missed'} ({ours:.2f}x)"
    )
    print(
        "where gpu-airgap's time goes (one in-process install; subprocess time is inside the phases that ran it):"
    )
    for label in sorted(phases, key=lambda k: (k.startswith("calls"), -phases[k])):
        value = phases[label]
        print(
            f"  {label:40} {int(value):5d}"
            if label.startswith("calls")
            else f"  {label:40} {value * 1000:7.0f} ms"
        )
    return 0  # a missed target is reported above; it must not stop the other benches of `make bench`


if __name__ == "__main__":
    sys.exit(main())
