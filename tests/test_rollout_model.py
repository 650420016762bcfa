"""The rollout model's arithmetic (bench/rollout_model.py), on figures chosen so the answers are known."""

from __future__ import annotations

import pytest

from bench import rollout_model as model

#: 10 s install, 10 MB bundle, 2 requests per pull; no restart or probe wait, links that never limit
COST = model.NodeCost(
    install_s=10.0,
    bundle_bytes=10_000_000,
    requests_per_pull=2,
    pod_restart_s=0.0,
    probe_period_s=0.0,
    probe_delay_s=0.0,
    node_link_bps=1e12,
    server_link_bps=1e12,
    controller_link_bps=1e12,
    ssh_task_s=0.0,
)


@pytest.mark.parametrize(
    ("value", "nodes", "expected"),
    [("10%", 1000, 100), ("10%", 5, 1), ("25%", 10, 3), ("7", 3, 3), ("1", 10, 1)],
)
def test_count_rounds_percentages_up_like_kubernetes_and_ansible(
    value: str, nodes: int, expected: int
) -> None:
    assert model.count(value, nodes) == expected


def test_daemonset_time_is_one_node_per_wave_of_max_unavailable() -> None:
    assert model.daemonset_rollout_s(COST, 1000, "1", canary=False) == pytest.approx(10_000, rel=1e-3)
    assert model.daemonset_rollout_s(COST, 1000, "10%", canary=False) == pytest.approx(100, rel=1e-3)
    # the canary is a wave of its own; 999 nodes in waves of 100 is 9 full waves and one of 99
    assert model.daemonset_rollout_s(COST, 1000, "10%", canary=True) == pytest.approx(10 + 100, rel=1e-3)


def test_a_wave_shares_the_registry_link() -> None:
    slow = model.NodeCost(**{**COST.__dict__, "server_link_bps": 100e6})  # 100 MB/s for the whole wave
    # 100 nodes at once: 1 GB through 100 MB/s takes 10 s more per wave
    assert model.daemonset_node_s(slow, 100) == pytest.approx(10 + 10, rel=1e-3)
    assert model.daemonset_node_s(slow, 1) == pytest.approx(10 + 0.1, rel=1e-3)


def test_ansible_batches_follow_serial_with_the_last_entry_repeating() -> None:
    assert model.ansible_batches(10, ["1", "25%"]) == [1, 3, 3, 3]
    assert model.ansible_batches(5, ["1", "100%"]) == [1, 4]


def test_ansible_forks_bound_each_task_and_copy_goes_through_the_controller() -> None:
    ssh = model.NodeCost(**{**COST.__dict__, "ssh_task_s": 1.0, "controller_link_bps": 10e6})
    # 10 hosts, 5 forks: every task runs in 2 rounds. http: 5 tasks (no copy of the bundle) of 1 s, install 10 s more
    assert model.ansible_batch_s(ssh, 10, 5, "http") == pytest.approx(2 * (5 * 1 + 10), rel=1e-3)
    # copy: the bundle over the controller's 10 MB/s, 5 copies at once: 5 s per round on top
    assert model.ansible_batch_s(ssh, 10, 5, "copy") == pytest.approx(2 * (5 * 1 + 10 + 5), rel=1e-3)


def test_a_pull_through_cache_per_rack_leaves_one_pull_per_rack_at_the_central_server() -> None:
    assert model.server_load(1000, 10_000_000, 2) == model.ServerLoad(10_000_000_000, 2000)
    assert model.server_load(
        1000, 10_000_000, 2, nodes_per_cache=40, central_requests_per_cache=3
    ) == model.ServerLoad(250_000_000, 75)
