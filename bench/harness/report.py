"""Ratios, targets, and the Markdown/JSON output of bench_peers."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness.scenarios import FAST, THROTTLED, Row


def machine() -> dict[str, str]:
    """nproc, CPU model and OS release of this machine."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    debian = (
        Path("/etc/debian_version").read_text().strip()
        if Path("/etc/debian_version").exists()
        else platform.platform()
    )
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "os": f"Debian {debian}",
        "kernel": platform.release(),
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
    }


def ratios(rows: list[Row]) -> dict[int, tuple[float | None, float | None]]:
    """Per row index: (wall / raw downloader, wall / fastest complete peer) within its group."""
    out: dict[int, tuple[float | None, float | None]] = {}
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.scenario, r.link, r.fmt), []).append(i)
    for idx in groups.values():
        raws = [rows[i] for i in idx if rows[i].raw and rows[i].wall]
        raw = (
            max(raws, key=lambda r: r.tool.count("+")) if raws else None
        )  # the hashing baseline when there is one
        peers = [rows[i].wall for i in idx if rows[i].peer and rows[i].complete and rows[i].wall]
        fastest = min(w for w in peers if w is not None) if peers else None
        for i in idx:
            w = rows[i].wall
            out[i] = (
                w / raw.wall if w and raw and raw.wall else None,
                w / fastest if w and fastest else None,
            )
    return out


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The issue's targets for our tool, each with the measured figure and met/missed."""
    rat = ratios(rows)
    found: list[dict[str, Any]] = []

    def ours(scenario: str, link: str, fmt: str) -> tuple[int, Row] | None:
        return next(
            (
                (i, r)
                for i, r in enumerate(rows)
                if (r.scenario, r.link, r.fmt, r.tool) == (scenario, link, fmt, "gpu-airgap")
            ),
            None,
        )

    for fmt in ("deb", "rpm"):
        for link, label in (
            (THROTTLED, "<= 1.3x aria2c (throttled)"),
            (FAST, "<= 1.3x aria2c + sha512sum (unthrottled)"),
        ):
            hit = ours("cold sync", link, fmt)
            if hit:
                x_raw, x_peer = rat[hit[0]]
                found.append(
                    {
                        "target": f"cold {fmt}: {label}",
                        "value": x_raw,
                        "met": x_raw is not None and x_raw <= 1.3,
                    }
                )
                found.append(
                    {
                        "target": f"cold {fmt} {link}: no slower than the fastest peer",
                        "value": x_peer,
                        "met": x_peer is not None and x_peer <= 1.0,
                    }
                )
        hit = ours("no-op re-sync", THROTTLED, fmt)
        if hit:
            x_peer = rat[hit[0]][1]
            found.append(
                {
                    "target": f"no-op {fmt}: <= 0.2x the fastest peer's no-op",
                    "value": x_peer,
                    "met": x_peer is not None and x_peer <= 0.2,
                }
            )
        hit = ours("interrupted + re-run", THROTTLED, fmt)
        if hit:
            found.append(
                {
                    "target": f"interrupted {fmt}: full recovery, no completed file re-downloaded",
                    "value": hit[1].recovered,
                    "met": hit[1].recovered == "yes",
                }
            )
    return found


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(rows: list[Row], meta: dict[str, Any], bundle_lines: list[str]) -> str:
    """The full report."""
    rat = ratios(rows)
    m = meta["machine"]
    out = [
        f"# gpu-airgap vs peers, {meta['date']}",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu']}, {m['os']}, kernel {m['kernel']}, {m['nginx']}. "
        f"Upstream: tests/upstream, {meta['payload_mb']} MiB payload per package, releases {meta['releases']}; "
        f"jobs={meta['jobs']} for every tool; wall = median of {meta['repeat']} runs. Bytes/requests: what the server logged (median run).",
        "",
        "| scenario | link | fmt | tool | wall s | x raw | x fastest peer | MiB served | requests | complete | upstream sig verified | recovered | note / error |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for i, r in enumerate(rows):
        x_raw, x_peer = rat[i]
        silent = "exit 0 but incomplete" if not r.error and not r.complete else ""
        note = "; ".join(x for x in (r.note, silent, f"ERROR: {r.error}" if r.error else "") if x).replace(
            "|", "/"
        )
        out.append(
            f"| {r.scenario} | {r.link} | {r.fmt} | {r.tool} | {_f(r.wall)} | {_f(x_raw)} | {_f(x_peer)} | {r.mib:.1f} | "
            f"{r.requests} | {'yes' if r.complete else 'NO'} | {r.signature} | {r.recovered} | {note} |"
        )
    out += ["", "Targets (gpu-airgap):", ""]
    for t in meta["targets"]:
        value = t["value"] if isinstance(t["value"], str) else _f(t["value"])
        out.append(f"- {'met' if t['met'] else 'MISSED'}: {t['target']}: {value}")
    out += [
        "",
        "Not applicable: aptly and apt-mirror have no rpm support; dnf reposync has no deb support.",
        "",
    ]
    out += ["Bundle (bench_bundle.py, same run):", "", *(f"    {line}" for line in bundle_lines), ""]
    return "\n".join(out)


def write(
    results_dir: Path,
    rows: list[Row],
    meta: dict[str, Any],
    bundle: list[dict[str, float]],
    bundle_lines: list[str],
) -> Path:
    """Write ``peers-<date>.md`` and ``.json`` into ``results_dir``; returns the Markdown path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = "peers-" + re.sub(r"[^0-9T-]", "", meta["date"].replace(" ", "T"))[:15]
    md = results_dir / f"{stem}.md"
    md.write_text(markdown(rows, meta, bundle_lines), encoding="utf-8")
    rat = ratios(rows)
    data = {
        **meta,
        "rows": [{**asdict(r), "x_raw": rat[i][0], "x_fastest_peer": rat[i][1]} for i, r in enumerate(rows)],
        "bundle": bundle,
    }
    (results_dir / f"{stem}.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return md
