"""``make demo`` (``python -m tests.demo``): the pipeline end to end against the local upstream.

Stage one: build the NVIDIA-like upstream into ``./demo-work/upstream``, serve it on a free
127.0.0.1 port and show what it serves. Later stages plug in as functions taking the
:class:`DemoContext` (sync -> bundle -> install into a scratch root -> configure -> report);
add them to :data:`STAGES` in order. The demo exits by itself.
"""

from __future__ import annotations

import gzip
import re
import shutil
import sys
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.upstream import CHANNELS, UpstreamServer, UpstreamTree, cached_upstream

WORK = Path("demo-work")


@dataclass
class DemoContext:
    """What one stage hands to the next."""

    work: Path  #: ./demo-work
    tree: UpstreamTree  #: the built upstream
    server: UpstreamServer  #: serving ``tree.root``
    notes: list[str] = field(default_factory=list)  #: lines for the final report


def say(line: str = "") -> None:
    """Print one line of demo output."""
    print(line, flush=True)


def stage_build_upstream(work: Path) -> UpstreamTree:
    """Build (or reuse) the local upstream and expose it at ./demo-work/upstream."""
    tree = cached_upstream(work / ".cache")
    link = work / "upstream"
    if link.is_symlink() or link.exists():
        link.unlink() if link.is_symlink() else shutil.rmtree(link)
    link.symlink_to(tree.root.resolve(), target_is_directory=True)
    say(
        f"== upstream built in {tree.build_seconds:.1f} s (cached after the first run): {link} -> {tree.root}"
    )
    return tree


def _fetch(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:  # 127.0.0.1 only
        return int(resp.status), resp.read()


def stage_show_upstream(ctx: DemoContext) -> None:
    """List channels, repos, package counts and the key, then fetch a few URLs like a client would."""
    tree, server = ctx.tree, ctx.server
    say(f"== serving {tree.root} at {server.url}/")
    say(f"   signing key fingerprint: {tree.key_fingerprint}")
    for channel in CHANNELS:
        say(f"   {channel}: toolkit versions {', '.join(tree.versions(channel))}")
        for repo in sorted((tree.root / channel / "deb").iterdir()):
            if repo.is_dir():
                count = (repo / "Packages").read_text().count("\nPackage: ") + 1
                say(
                    f"     deb {channel}/deb/{repo.name}: {count} packages (InRelease, Packages, Packages.xz)"
                )
        for repo in sorted((tree.root / channel / "rpm").iterdir()):
            if repo.is_dir():
                say(
                    f"     rpm {channel}/rpm/{repo.name}: {_rpm_count(repo)} packages (repodata, repomd.xml.asc)"
                )
    say("== fetching like apt and dnf do")
    for path in (
        "stable/deb/nvidia-container-toolkit.list",
        "gpgkey",
        "stable/deb/amd64/InRelease",
        "stable/rpm/x86_64/repodata/repomd.xml.asc",
        "stable/deb/amd64/nvidia-container-toolkit_1.17.8-1_amd64.deb",
    ):
        status, body = _fetch(server.url_for(path))
        say(f"   GET {server.url_for(path)} -> {status}, {len(body)} bytes")
    ctx.notes.append(f"upstream served {len(server.log)} requests")


def _rpm_count(repo: Path) -> int:
    ns = {"r": "http://linux.duke.edu/metadata/repo"}
    repomd = ET.parse(repo / "repodata" / "repomd.xml").getroot()
    href = ""
    for data in repomd.findall("r:data", ns):
        location = data.find("r:location", ns)
        if data.get("type") == "primary" and location is not None:
            href = location.get("href", "")
    primary = gzip.decompress((repo / href).read_bytes()).decode()
    match = re.search(r'packages="(\d+)"', primary)
    return int(match.group(1)) if match else 0


#: Stages after the upstream is up, in order. Later work adds: sync, bundle, install, configure, report.
STAGES: list[Callable[[DemoContext], None]] = [stage_show_upstream]


def main() -> int:
    """Run every stage and exit."""
    WORK.mkdir(exist_ok=True)
    tree = stage_build_upstream(WORK)
    with UpstreamServer(tree.root) as server:
        ctx = DemoContext(WORK, tree, server)
        for stage in STAGES:
            stage(ctx)
    say("== report")
    for note in ctx.notes:
        say(f"   {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
