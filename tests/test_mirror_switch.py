"""A sync's commit is all or nothing: killed halfway through switching its files in, the next command completes it.

The kill is simulated by stopping the renames of the switch after the first few (the only
monkeypatching here: a real SIGKILL cannot be aimed between two renames). Then no reader may see
new metadata beside the old ``state.json``: the next ``mirror verify``, ``status``, ``bundle build``
or ``sync`` completes the journaled switch first.
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mirror.disk import store
from tests.cli_runner import CliResult, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.upstream import UpstreamServer, UpstreamTree, copy_upstream, resign_inrelease


@pytest.fixture
def republished(upstream_tree: UpstreamTree, tmp_path: Path) -> Iterator[tuple[UpstreamTree, UpstreamServer]]:
    """The local upstream after a republish: new Packages.xz bytes and a re-signed InRelease."""
    tree = copy_upstream(upstream_tree, tmp_path / "site")
    repo = tree.root / "stable/deb/amd64"
    (repo / "Packages.xz").write_bytes(lzma.compress((repo / "Packages").read_bytes(), preset=1))
    resign_inrelease(tree, repo)
    with UpstreamServer(tree.root) as server:
        yield tree, server


def _sync(tree: UpstreamTree, server: UpstreamServer, dest: Path, version: str) -> CliResult:
    return run_mirror_sync(
        dest,
        server.url,
        tree.public_key,
        "--quiet",
        # the republished copy is served at another port: tell the mirror its upstream moved
        "--replace-upstream",
        version=version,
    )


class _Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, no cleanup runs."""


def _stop_switch_after(monkeypatch: pytest.MonkeyPatch, dest: Path, renames: int) -> None:
    real = os.replace
    done = []
    staging = str(dest / ".gpu-airgap/staging")

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(src).startswith(staging) and not str(dst).startswith(staging):  # the switch, not a download
            if len(done) == renames:
                raise _Killed
            done.append(dst)
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def _verify(dest: Path, **_: object) -> CliResult:
    return run_cli("mirror", "verify", "--mirror", str(dest))


def _status(dest: Path, **_: object) -> CliResult:
    return run_cli("mirror", "status", "--mirror", str(dest), "--offline", "--json")


def _bundle(dest: Path, *, key: TestKey, out: Path, **_: object) -> CliResult:
    return run_bundle_build(dest, key, out / "b.tar.zst", version="1.18.0")


@pytest.mark.parametrize("reader", [_verify, _status, _bundle], ids=["verify", "status", "bundle-build"])
def test_a_switch_stopped_halfway_is_completed_by_the_next_reader(
    upstream_tree: UpstreamTree,
    upstream_server: UpstreamServer,
    republished: tuple[UpstreamTree, UpstreamServer],
    operator_key: TestKey,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    reader: Callable[..., CliResult],
) -> None:
    dest, clean = tmp_path / "mirror", tmp_path / "clean"
    assert _sync(upstream_tree, upstream_server, dest, "1.17.8").exit_code == 0
    shutil.copytree(dest, clean)
    tree, server = republished
    assert _sync(tree, server, clean, "1.18.0").exit_code == 0  # what the switch must end as

    _stop_switch_after(monkeypatch, dest, renames=5)  # the four packages and the new InRelease
    with pytest.raises(_Killed):
        _sync(tree, server, dest, "1.18.0")
    monkeypatch.undo()
    assert (dest / ".gpu-airgap/switch.json").exists()
    new_inrelease = (tree.root / "stable/deb/amd64/InRelease").read_bytes()
    assert (
        dest / "stable/deb/amd64/InRelease"
    ).read_bytes() == new_inrelease  # the mix a reader must not see
    assert "1.18.0-1" not in (dest / ".gpu-airgap/state.json").read_text()

    out = tmp_path / "out"
    out.mkdir()
    result = reader(dest, key=operator_key, out=out)
    assert result.exit_code == 0, result.stderr
    assert not (dest / ".gpu-airgap/switch.json").exists()
    state = store.MirrorState.load(dest)
    assert [r.toolkit_version for r in state.repos[0].releases] == ["1.17.8-1", "1.18.0-1"]
    assert _verify(dest).exit_code == 0
    for name in ("InRelease", "Packages.xz"):
        assert (dest / "stable/deb/amd64" / name).read_bytes() == (
            clean / "stable/deb/amd64" / name
        ).read_bytes()


def test_a_switch_stopped_halfway_is_completed_by_the_next_sync_which_then_downloads_nothing(
    upstream_tree: UpstreamTree,
    republished: tuple[UpstreamTree, UpstreamServer],
    upstream_server: UpstreamServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    dest = tmp_path / "mirror"
    assert _sync(upstream_tree, upstream_server, dest, "1.17.8").exit_code == 0
    tree, server = republished
    _stop_switch_after(monkeypatch, dest, renames=2)
    with pytest.raises(_Killed):
        _sync(tree, server, dest, "1.18.0")
    monkeypatch.undo()
    server.reset()
    again = run_mirror_sync(
        dest, server.url, tree.public_key, "--json", "--replace-upstream", version="1.18.0"
    )
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["downloaded_files"] == 0
    assert not [r for r in server.log if r.path.endswith(".deb")]
    assert not (dest / ".gpu-airgap/switch.json").exists() and not (dest / ".gpu-airgap/staging").exists()
    assert _verify(dest).exit_code == 0
