"""Issue 25 item 1: a mirror holds both channels side by side, and builds use stable unless told otherwise.

Real ``mirror sync`` runs against the loopback upstream (stable 1.17.8, 1.18.0, 1.20.1; experimental
1.20.0~rc.1) and real ``bundle build`` runs signed by the throwaway operator key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror.disk import store
from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.upstream import UpstreamServer, UpstreamTree


def _sync(tree: UpstreamTree, server: UpstreamServer, dest: Path, *args: str) -> CliResult:
    return run_mirror_sync(dest, server.url, tree.public_key, "--quiet", *args, version=None)


def _build(mirror: Path, key: TestKey, out: Path, *args: str) -> CliResult:
    return run_bundle_build(mirror, key, out, "--json", *args, version=None)


@pytest.fixture(scope="module")
def both_channels(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """Stable 1.17.8 synced first, then the experimental channel synced into the same mirror (read-only)."""
    dest = tmp_path_factory.mktemp("both-channels")
    for args in (("--version", "1.17.8"), ("--channel", "experimental")):
        synced = _sync(upstream_tree, _upstream_session_server, dest, *args)
        assert synced.exit_code == 0, synced.stderr
    return dest


def test_syncing_the_experimental_channel_keeps_the_stable_one(both_channels: Path) -> None:
    state = store.MirrorState.load(both_channels)
    held = {r.key: [rel.toolkit_version for rel in r.releases] for r in state.repos}
    assert held == {"stable/deb/amd64": ["1.17.8-1"], "experimental/deb/amd64": ["1.20.0~rc.1-1"]}
    assert run_cli("mirror", "verify", "--mirror", str(both_channels)).exit_code == 0


def test_a_plain_build_ships_stable_even_after_an_experimental_sync(
    both_channels: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    built = _build(both_channels, operator_key, tmp_path / "b.tar.zst")
    assert built.exit_code == 0, built.stderr
    report = json.loads(built.stdout)
    assert (report["toolkit_version"], report["channel"], report["release_candidate"]) == (
        "1.17.8",
        "stable",
        False,
    )
    pinned = _build(both_channels, operator_key, tmp_path / "p.tar.zst", "--version", "1.17.8")
    assert pinned.exit_code == 0, pinned.stderr
    assert json.loads(pinned.stdout)["toolkit_version"] == "1.17.8"


def test_release_candidates_are_built_when_the_channel_is_explicit(
    both_channels: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    built = _build(both_channels, operator_key, tmp_path / "rc.tar.zst", "--channel", "experimental")
    assert built.exit_code == 0, built.stderr
    report = json.loads(built.stdout)
    assert (report["toolkit_version"], report["channel"]) == ("1.20.0~rc.1", "experimental")


def test_a_version_only_the_experimental_channel_has_is_refused_without_the_channel(
    both_channels: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    out = tmp_path / "rc.tar.zst"
    refused = _build(both_channels, operator_key, out, "--version", "1.20.0~rc.1")
    assert refused.exit_code == ExitCode.USAGE, refused.stderr
    assert (
        "the mirror's stable channel has no toolkit 1.20.0~rc.1 for deb/amd64, its experimental channel "
        "(release candidates) has: pass --channel experimental to build a release candidate"
    ) in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_version_neither_channel_has_is_unresolvable_as_before(
    both_channels: Path, operator_key: TestKey, tmp_path: Path
) -> None:
    refused = _build(both_channels, operator_key, tmp_path / "x.tar.zst", "--version", "1.18.0")
    assert refused.exit_code == ExitCode.UNRESOLVABLE, refused.stderr
    assert "stable/deb/amd64 repository has no toolkit 1.18.0" in refused.stderr


def test_an_experimental_only_mirror_builds_only_with_the_channel_named(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, operator_key: TestKey, tmp_path: Path
) -> None:
    dest = tmp_path / "rc-mirror"
    assert _sync(upstream_tree, upstream_server, dest, "--channel", "experimental").exit_code == 0
    out = tmp_path / "b.tar.zst"
    refused = _build(dest, operator_key, out)
    assert refused.exit_code == ExitCode.USAGE, refused.stderr
    assert (
        "the mirror holds deb/amd64 in the experimental channel (release candidates) only and builds use stable "
        "unless told otherwise: pass --channel experimental to build a release candidate"
    ) in refused.stderr
    assert not out.exists()
    built = _build(dest, operator_key, out, "--channel", "experimental")
    assert built.exit_code == 0 and json.loads(built.stdout)["channel"] == "experimental", built.stderr
