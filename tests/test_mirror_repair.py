"""A re-sync repairs what ``mirror verify`` reports: files damaged in place are downloaded again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli_runner import run_cli, run_mirror_sync
from tests.upstream import UpstreamServer, UpstreamTree


def _flip(path: Path, offset: int = 200) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))  # same size: only the digest can tell


def test_resync_downloads_again_the_files_that_no_longer_match_their_recorded_digest(
    synced_mirror: Path, upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    shutil.copytree(synced_mirror, dest)
    deb = dest / "stable/deb/amd64/nvidia-container-toolkit_1.17.8-1_amd64.deb"
    rpm = next((dest / "stable/rpm/x86_64").glob("libnvidia-container1-1.17.8-1.x86_64.rpm"))
    index = next((dest / "stable/rpm/x86_64/repodata").glob("*-filelists.xml.gz"))
    for path in (deb, rpm, index):
        _flip(path)
    damaged = run_cli("mirror", "verify", "--mirror", str(dest), "--json")
    assert damaged.exit_code == 9
    assert len(json.loads(damaged.stdout)["problems"]) == 3

    synced = run_mirror_sync(dest, upstream_server.url, upstream_tree.public_key, "--json", fmt="deb,rpm")
    assert synced.exit_code == 0, synced.stderr
    files = [r.path.rsplit("/", 1)[-1] for r in upstream_server.log]
    fetched = sorted(f for f in files if f.endswith((".deb", ".rpm", "-filelists.xml.gz", "-other.xml.gz")))
    assert fetched == sorted([deb.name, rpm.name, index.name])  # exactly the damaged ones, nothing else
    assert json.loads(synced.stdout)["downloaded_files"] == 3
    for path in (deb, rpm, index):
        relative = path.relative_to(dest)
        assert path.read_bytes() == (upstream_tree.root / relative).read_bytes()
    assert run_cli("mirror", "verify", "--mirror", str(dest)).exit_code == 0
