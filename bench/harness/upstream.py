"""The two upstream states of bench_peers: release N (site A) and, later, release N+1 too (site B).

Site B is a cached tests/upstream tree with two stable releases. Site A is derived from it:
the same files (hard links) minus the newer release in stable/deb/amd64 and stable/rpm/x86_64,
whose indexes are rewritten and re-signed with the same key, so a tool's trust survives the swap.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.harness.runs import sha256
from bench.harness.tools import FOUR
from tests.upstream import UpstreamTree, cached_upstream, stop_agent
from tests.upstream.debs import write_index
from tests.upstream.rpms import write_repodata

OLD, NEW = "1.20.0-1", "1.20.1-1"
DEB_REPO, RPM_REPO = "stable/deb/amd64", "stable/rpm/x86_64"


@dataclass(frozen=True)
class Sites:
    """The served trees and what a complete sync of each release holds."""

    tree: UpstreamTree  #: site B (both releases), with the signing key
    site_a: Path  #: release OLD only

    def release_files(self, fmt: str, version: str) -> dict[str, str]:
        """The four package file names of ``version`` -> sha256."""
        repo = self.tree.root / (DEB_REPO if fmt == "deb" else RPM_REPO)
        names = [f"{n}_{version}_amd64.deb" if fmt == "deb" else f"{n}-{version}.x86_64.rpm" for n in FOUR]
        return {name: sha256(repo / name) for name in names}

    def raw_files(self, fmt: str, site: Path, version: str) -> tuple[str, ...]:
        """What a sync of ``version`` from ``site`` fetches: signed metadata, indexes, the four packages."""
        repo = DEB_REPO if fmt == "deb" else RPM_REPO
        if fmt == "deb":
            meta = [f"{repo}/InRelease", f"{repo}/Packages.xz"]
        else:
            meta = sorted(f"{repo}/repodata/{p.name}" for p in (site / repo / "repodata").iterdir())
        return (*meta, *(f"{repo}/{name}" for name in self.release_files(fmt, version)))


def _drop_new_release(site: Path, tree: UpstreamTree) -> None:
    deb = site / DEB_REPO
    for path in deb.glob(f"*_{NEW}_*.deb"):
        path.unlink()
    stanzas = (tree.root / DEB_REPO / "Packages").read_text(encoding="ascii").split("\n\n")
    kept = [s for s in stanzas if s.strip() and f"\nVersion: {NEW}\n" not in f"\n{s}\n"]
    for name in ("Packages", "Packages.xz", "InRelease"):
        (deb / name).unlink()  # hard links into the cached tree: never write through them
    write_index(
        deb,
        arch="amd64",
        channel="stable",
        packages=("\n\n".join(kept) + "\n\n").encode("ascii"),
        key=tree.signing_key,
    )
    rpm = site / RPM_REPO
    for path in rpm.glob(f"*-{NEW}.*.rpm"):
        path.unlink()
    shutil.rmtree(rpm / "repodata")
    write_repodata(rpm, key=tree.signing_key)


def prepare_sites(work: Path, payload_mb: float) -> Sites:
    """Build (or reuse) site B and derive site A under ``work``."""
    tree = cached_upstream(
        payload_mb=payload_mb, stable_versions=(OLD, NEW), experimental_versions=("1.20.0~rc.1-1",), workers=2
    )
    site_a = work / "site-a"
    # hard links where the cache and the work directory share a filesystem, else a copy
    linked = tree.root.stat().st_dev == work.stat().st_dev
    subprocess.run(["cp", "-al" if linked else "-a", str(tree.root), str(site_a)], check=True)
    try:
        _drop_new_release(site_a, tree)
    finally:
        stop_agent(tree.gnupghome)
    return Sites(tree, site_a)


def serve(link: Path, target: Path) -> None:
    """Point the served symlink ``link`` at ``target`` atomically."""
    tmp = link.with_name(link.name + ".new")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)
