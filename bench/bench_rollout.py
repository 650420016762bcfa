"""Rolling a bundle out to 1,000 and 10,000 nodes: the rollout model fed with measured figures (issue 16).

No cluster is needed. Measured here, for real:

- the per-node install: ``gpu-airgap-node.pyz install`` of NVIDIA's real 1.20.0 bundle into fresh
  minimal Debian roots (``bench_real_install.py``'s set-up and its zipapp method), median of ``RUNS`` (``--runs``);
- a node's pull from the registry: the bundle pushed to the real ``docker-registry`` (distribution
  2.8) and pulled by digest with ``gpu-airgap bundle pull``, the requests and bytes read from the
  registry's access log;
- the same pulls through a second ``docker-registry`` in pull-through cache mode (``proxy.remoteurl``),
  as a per-rack node cache: what still reaches the central registry.

Then :mod:`bench.rollout_model` gives the time to finish for DaemonSet ``maxUnavailable`` and Ansible
``serial``/``forks`` settings, and the central server's bytes and requests with and without caches.
The model's assumptions (links, pod restart, SSH cost per task) are printed with the figures.

Run: ``make bench`` or ``sudo .venv/bin/python bench/bench_rollout.py [--runs N]`` (default 3).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_real_install as real
from bench import rollout_model as model
from tests.cli_runner import run_cli
from tests.gpgkeys import TestKey
from tests.oci_registry import Registry

PULLS = 3  #: pulls per registry set-up (>= 2: the first through a cache fills it)
NODES_PER_CACHE = 40  #: one pull-through cache per rack of 40 nodes
_ACCESS = re.compile(r'"(GET|HEAD|POST|PUT|PATCH) (\S+) HTTP/[0-9.]+" ([0-9]{3}) ([0-9]+|-)')


def measure_install(inputs: Dict[str, Any], work: Path) -> List[float]:
    """Wall seconds of the real zipapp install into fresh roots, ``RUNS`` times."""
    times = []
    for _ in range(real.RUNS):
        root = real.fresh_root(inputs["tarball"], work / "root")
        times.append(real.run_zipapp(inputs, root))
    return times


def _traffic(log: Path, start: int) -> Tuple[int, int]:
    """Requests and response bytes in the registry's access log after byte offset ``start``."""
    requests = sent = 0
    with open(log, "rb") as data:
        data.seek(start)
        for line in data.read().decode("utf-8", "replace").splitlines():
            match = _ACCESS.search(line)
            if match:
                requests += 1
                sent += int(match.group(4)) if match.group(4) != "-" else 0
    return requests, sent


def _logged(registry: Registry, proxy_of: str = "") -> None:
    """Turn the access log on (the test helper turns it off), and pull-through mode for a cache."""
    config = json.loads(registry.config.read_text())
    config["log"] = {"level": "error", "accesslog": {"disabled": False}}
    if proxy_of:
        config["proxy"] = {"remoteurl": f"http://{proxy_of}"}
    registry.config.write_text(json.dumps(config))


def _pull(ref: str, key: TestKey, out: Path) -> None:
    done = run_cli("bundle", "pull", ref, "--keyring", str(key.public), "--output", str(out))
    if done.exit_code != 0:
        raise RuntimeError(f"bundle pull {ref} failed: {done.stderr.strip()}")
    out.unlink()


def measure_registry(bundle: Path, key: TestKey, work: Path) -> Dict[str, float]:
    """Per pull: requests and bytes at the central registry, directly and through a pull-through cache."""
    central = Registry(work / "central")
    _logged(central)
    with central:
        pushed = run_cli(
            "bundle",
            "push",
            str(bundle),
            central.ref("fleet/nvct:1.20.0"),
            "--keyring",
            str(key.public),
            "--json",
        )
        if pushed.exit_code != 0:
            raise RuntimeError(f"bundle push failed: {pushed.stderr.strip()}")
        digest = json.loads(pushed.stdout)["digest"]
        mark = central.log.stat().st_size
        for i in range(PULLS):
            _pull(central.ref(f"fleet/nvct@{digest}"), key, work / f"direct{i}.tar.zst")
        direct = _traffic(central.log, mark)
        cache = Registry(work / "cache")
        _logged(cache, proxy_of=central.host)
        upstream = []  #: the central registry's (requests, bytes) for each pull through the cache
        with cache:
            for i in range(PULLS):
                mark = central.log.stat().st_size
                _pull(cache.ref(f"fleet/nvct@{digest}"), key, work / f"cached{i}.tar.zst")
                upstream.append(_traffic(central.log, mark))
    later = [sum(u[0] for u in upstream[1:]) / (PULLS - 1), sum(u[1] for u in upstream[1:]) / (PULLS - 1)]
    # a rack's first node fills its cache; the others are served by it (and cost the central registry `later`)
    return {
        "requests_per_pull": direct[0] / PULLS,
        "bytes_per_pull": direct[1] / PULLS,
        "first_through_cache": upstream[0][0],
        "first_through_cache_bytes": upstream[0][1],
        "later_through_cache": later[0],
        "later_through_cache_bytes": later[1],
        "central_requests_per_cache": round(upstream[0][0] + (NODES_PER_CACHE - 1) * later[0]),
        "central_bytes_per_cache": round(upstream[0][1] + (NODES_PER_CACHE - 1) * later[1]),
    }


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


#: (label, maxUnavailable, canary first)
DAEMONSET = (
    ("maxUnavailable 1 (the old default)", "1", False),
    ("maxUnavailable 10%", "10%", False),
    ("canary, then maxUnavailable 10% (default)", "10%", True),
    ("canary, then maxUnavailable 25%", "25%", True),
)
#: (label, serial, forks, transport)
ANSIBLE = (
    ("copy, serial [1, 25%], forks 5 (Ansible's default)", ["1", "25%"], 5, "copy"),
    ("copy, serial [1, 25%], forks 50", ["1", "25%"], 50, "copy"),
    ("http, serial [1, 25%], forks 50", ["1", "25%"], 50, "http"),
    ("oci, serial [1, 25%], forks 200", ["1", "25%"], 200, "oci"),
)


def report(cost: model.NodeCost, installs: List[float], pulls: Dict[str, float]) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"({os.cpu_count()} CPUs, load average {load} at the end)")
    print(
        f"measured: install {statistics.median(installs):.2f} s (median of {', '.join(f'{t:.2f}' for t in installs)}), "
        f"bundle {cost.bundle_bytes / 1e6:.1f} MB, {pulls['requests_per_pull']:.0f} requests per pull, "
        f"through a pull-through cache the first pull costs the central registry {pulls['first_through_cache']:.0f} requests and "
        f"{pulls['first_through_cache_bytes'] / 1e6:.1f} MB, each later one {pulls['later_through_cache']:.0f} requests and "
        f"{pulls['later_through_cache_bytes'] / 1e6:.1f} MB; "
        f"{pulls['central_requests_per_cache']:.0f} requests and {pulls['central_bytes_per_cache'] / 1e6:.1f} MB per rack of {NODES_PER_CACHE}"
    )
    print(
        f"assumed: pod restart {cost.pod_restart_s:.0f} s, readiness probe every {cost.probe_period_s:.0f} s, links "
        f"{cost.server_link_bps * 8 / 1e9:.0f} Gbit/s (registry/HTTP server, nodes), {cost.controller_link_bps * 8 / 1e9:.0f} Gbit/s "
        f"(Ansible controller), {cost.ssh_task_s} s per Ansible task per host"
    )
    print(f"{'time to finish':58} {'1,000 nodes':>12} {'10,000 nodes':>13}")
    for label, unavailable, canary in DAEMONSET:
        times = [model.daemonset_rollout_s(cost, n, unavailable, canary) for n in (1000, 10000)]
        print(f"  DaemonSet, {label:46} {_duration(times[0]):>12} {_duration(times[1]):>13}")
    for label, serial, forks, transport in ANSIBLE:
        times = [model.ansible_rollout_s(cost, n, serial, forks, transport) for n in (1000, 10000)]
        print(f"  Ansible, {label:48} {_duration(times[0]):>12} {_duration(times[1]):>13}")
    print(f"central registry per rollout (a pull-through cache per {NODES_PER_CACHE} nodes):")
    for n in (1000, 10000):
        plain = model.server_load(n, int(pulls["bytes_per_pull"]), round(pulls["requests_per_pull"]))
        cached = model.server_load(
            n,
            int(pulls["central_bytes_per_cache"]),
            0,
            NODES_PER_CACHE,
            int(pulls["central_requests_per_cache"]),
        )
        print(
            f"  {n:>6,} nodes: without {plain.bytes / 1e9:6.1f} GB {plain.requests:>7,} requests;"
            f"  with {cached.bytes / 1e9:5.2f} GB {cached.requests:>6,} requests"
        )


def main() -> int:
    def measure(inputs: Dict[str, Any], work: Path) -> Tuple[List[float], Dict[str, float]]:
        return measure_install(inputs, work), measure_registry(inputs["bundle"], inputs["key"], work)

    measured = real.with_prepared_inputs("bench_rollout", measure)
    if measured is not None:
        installs, pulls = measured
        cost = model.NodeCost(
            statistics.median(installs), int(pulls["bytes_per_pull"]), round(pulls["requests_per_pull"])
        )
        report(cost, installs, pulls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
