"""Smoke test of bench/bench_peers.py's harness, so it cannot rot between `make bench` runs.

Runs the cold and no-op scenarios on a payload-free upstream, once, for our tool and the raw
downloader only (the peers run in `make bench`), and checks the shape of the table and the JSON.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.bench_peers import run_scenarios
from bench.harness import report

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("nginx") and shutil.which("aria2c")), reason="needs nginx and aria2c"
    ),
]


def test_harness_runs_our_tool_and_the_raw_downloader(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    rows = run_scenarios(
        work, payload_mb=0.0, jobs=2, repeat=1, only=("cold", "noop"), tools=("gpu-airgap", "aria2c")
    )

    got = {(r.scenario, r.link, r.fmt, r.tool) for r in rows}
    for fmt in ("deb", "rpm"):
        assert ("cold sync", "20 MiB/s per conn", fmt, "gpu-airgap") in got
        assert ("cold sync", "unthrottled", fmt, "aria2c + sha512sum") in got
        assert ("no-op re-sync", "20 MiB/s per conn", fmt, "aria2c") in got
    for r in rows:
        assert r.error == "" and r.complete, r
        assert r.wall is not None and r.wall > 0
    ours = [r for r in rows if r.tool == "gpu-airgap"]
    assert all(r.signature == "yes (wrong key refused)" for r in ours)
    assert all(r.requests > 0 for r in ours)
    cold = [r for r in ours if r.scenario == "cold sync"]
    assert all(r.mib > 0 for r in cold)

    meta = {
        "date": "2026-01-01 00:00 UTC",
        "machine": report.machine(),
        "payload_mb": 0.0,
        "releases": "a, then b",
        "jobs": 2,
        "repeat": 1,
        "seconds": 1.0,
        "targets": report.targets(rows),
    }
    md = report.write(tmp_path / "results", rows, meta, [], ["(skipped)"])
    text = md.read_text()
    assert "| scenario | link | fmt | tool | wall s | x raw | x fastest peer |" in text
    assert text.count("| cold sync |") == len([r for r in rows if r.scenario == "cold sync"])
    data = json.loads(md.with_suffix(".json").read_text())
    assert len(data["rows"]) == len(rows)
    assert {"tool", "wall", "x_raw", "x_fastest_peer", "mib", "requests", "complete", "signature"} <= set(
        data["rows"][0]
    )
    assert any(t["target"].startswith("cold deb") for t in data["targets"])
