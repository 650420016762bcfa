"""The rollout model of ``bench_rollout.py``: how long a fleet rollout takes and what it asks of the servers (pure).

Every function takes the measured per-node figures (:class:`NodeCost`) and the site's settings and
returns seconds, bytes or requests; nothing here measures or sleeps, so the arithmetic is tested on
its own (``tests/test_rollout_model.py``).

DaemonSet: the controller replaces ``maxUnavailable`` pods at a time and starts the next as soon as
one is ready, so with equal per-node times the rollout is a sequence of waves. A node's time is the
pod's restart, the pull (the registry's bandwidth is shared by the wave), the install, and the wait
for the readiness probe (half a period on average). The canary is one node, then the rest.

Ansible: ``serial`` batches, the first of one host (the canary). The linear strategy runs each task
on every host of the batch, ``forks`` at a time, before the next task, so a batch costs, per task,
``ceil(batch / forks)`` rounds of (SSH overhead + the task's work); the copy task's work is the bundle
over the controller's link, shared by the forks running at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Tuple


@dataclass(frozen=True)
class NodeCost:
    """What one node costs: measured (install, bundle size, requests per pull) and assumed (the rest)."""

    install_s: float  #: measured: gpu-airgap install of the real bundle into a fresh node root
    bundle_bytes: int  #: measured: the bundle a node fetches
    requests_per_pull: int  #: measured: requests a node's pull sends to the registry
    pod_restart_s: float = 3.0  #: assumed: delete an idle pod, start the next (image cached on the node)
    probe_period_s: float = 5.0  #: the readiness probe's period (the rendered DaemonSet's)
    probe_delay_s: float = 2.0  #: its initialDelaySeconds
    node_link_bps: float = 10e9 / 8  #: assumed: a node's NIC, bytes/s
    server_link_bps: float = 10e9 / 8  #: assumed: the registry's or HTTP server's NIC, bytes/s
    controller_link_bps: float = 1e9 / 8  #: assumed: the Ansible controller's link, bytes/s
    ssh_task_s: float = 0.5  #: assumed: one Ansible task on one host over SSH (ControlPersist, pipelining)


def count(value: str, nodes: int) -> int:
    """``maxUnavailable``/``serial`` as nodes: ``"10%"`` of ``nodes`` (rounded up, at least 1) or a count."""
    if value.endswith("%"):
        return max(1, math.ceil(nodes * float(value[:-1]) / 100))
    return max(1, min(nodes, int(value)))


def _fetch_s(cost: NodeCost, concurrent: int, server_bps: float) -> float:
    """One node's download while ``concurrent`` nodes share the server's link."""
    return cost.bundle_bytes / min(cost.node_link_bps, server_bps / max(1, concurrent))


def daemonset_node_s(cost: NodeCost, concurrent: int, server_bps: float | None = None) -> float:
    """One node's update in a wave of ``concurrent`` (restart, pull, install, readiness)."""
    probe_wait = max(cost.probe_delay_s, cost.probe_period_s / 2)
    pull = _fetch_s(cost, concurrent, server_bps or cost.server_link_bps)
    return cost.pod_restart_s + pull + cost.install_s + probe_wait


def daemonset_rollout_s(cost: NodeCost, nodes: int, max_unavailable: str, canary: bool) -> float:
    """Time to roll a new bundle over ``nodes``: an optional one-node canary, then waves of ``max_unavailable``."""
    rest = nodes - 1 if canary else nodes
    total = daemonset_node_s(cost, 1) if canary else 0.0
    wave = count(max_unavailable, nodes)
    full, last = divmod(rest, wave)
    total += full * daemonset_node_s(cost, wave)
    if last:
        total += daemonset_node_s(cost, last)
    return total


#: the role's tasks that run on every host (bundle path), and what each one moves: "copy" the bundle
#: over SSH (transport copy), "fetch" it from a server (http/oci), "install" runs the installer.
ROLE_TASKS: Tuple[Tuple[str, str], ...] = (
    ("cache directory", ""),
    ("copy key and tool", ""),
    ("copy bundle", "copy"),
    ("fetch bundle", "fetch"),
    ("install", "install"),
    ("restart handler", ""),
)


def ansible_batch_s(cost: NodeCost, batch: int, forks: int, transport: str) -> float:
    """One ``serial`` batch of ``batch`` hosts with ``forks``: each task in ``ceil(batch / forks)`` rounds."""
    rounds, running = math.ceil(batch / forks), min(batch, forks)
    total = 0.0
    for _, work in ROLE_TASKS:
        if (work == "copy" and transport != "copy") or (work == "fetch" and transport == "copy"):
            continue
        seconds = cost.ssh_task_s
        if work == "copy":
            seconds += _fetch_s(cost, running, cost.controller_link_bps)
        elif work == "fetch":
            seconds += _fetch_s(cost, running, cost.server_link_bps)
        elif work == "install":
            seconds += cost.install_s
        total += rounds * seconds
    return total


def ansible_batches(nodes: int, serial: List[str]) -> List[int]:
    """Ansible's batch sizes for ``serial`` (a list: the last entry repeats) over ``nodes`` hosts."""
    sizes, left, i = [], nodes, 0
    while left > 0:
        size = min(left, count(serial[min(i, len(serial) - 1)], nodes))
        sizes.append(size)
        left -= size
        i += 1
    return sizes


def ansible_rollout_s(cost: NodeCost, nodes: int, serial: List[str], forks: int, transport: str) -> float:
    return sum(ansible_batch_s(cost, size, forks, transport) for size in ansible_batches(nodes, serial))


@dataclass(frozen=True)
class ServerLoad:
    """What the central registry or HTTP server serves for one rollout."""

    bytes: int
    requests: int


def server_load(
    nodes: int,
    bytes_per_pull: int,
    requests_per_pull: int,
    nodes_per_cache: int = 0,
    central_requests_per_cache: int = 0,
) -> ServerLoad:
    """Without a cache every node pulls from the central server; with a pull-through cache per
    ``nodes_per_cache`` nodes, only each cache's first pull reaches it."""
    if not nodes_per_cache:
        return ServerLoad(nodes * bytes_per_pull, nodes * requests_per_pull)
    caches = math.ceil(nodes / nodes_per_cache)
    return ServerLoad(caches * bytes_per_pull, caches * central_requests_per_cache)
