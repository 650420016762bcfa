"""Issue 25 item 5: ``mirror list`` shows the releases per channel/format/arch, upstream and in the mirror.

A real mirror (stable 1.17.8 with its lockfile, then the experimental channel) synced from the
loopback upstream (stable 1.17.8, 1.18.0, 1.20.1; experimental 1.20.0~rc.1); an unreachable
upstream is a closed port on 127.0.0.1, its retries recorded by the ``backoff`` fixture.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_cli
from tests.upstream import UpstreamServer, UpstreamTree


@pytest.fixture(scope="module")
def listed_mirror(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """Stable 1.17.8 (locked in ``gpu-airgap.lock`` beside it) and experimental, deb/amd64 (read-only)."""
    dest = tmp_path_factory.mktemp("listed") / "mirror"
    first = (
        "--upstream",
        _upstream_session_server.url,
        "--keyring",
        str(upstream_tree.public_key),
        "--version",
        "1.17.8",
        "--write-lock",
        str(dest.parent / "gpu-airgap.lock"),
    )
    for args in (first, ("--channel", "experimental")):
        synced = run_cli("mirror", "sync", "--dest", str(dest), "--format", "deb", "--quiet", *args)
        assert synced.exit_code == 0, synced.stderr
    return dest


def _list(mirror: Path, *args: str) -> CliResult:
    return run_cli("mirror", "list", "--mirror", str(mirror), *args)


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_list_marks_upstream_mirror_locked_and_release_candidates(
    listed_mirror: Path, _upstream_session_server: UpstreamServer
) -> None:
    listed = _list(listed_mirror, "--locked", str(listed_mirror.parent / "gpu-airgap.lock"))
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "stable/deb/amd64",
        "  1.20.1-1  [upstream]",
        "  1.18.0-1  [upstream]",
        "  1.17.8-1  [upstream, mirror, locked]",
        "experimental/deb/amd64",
        "  1.20.0~rc.1-1  [upstream, mirror, release candidate]",
    ]
    assert f"upstream {_upstream_session_server.url} (from the lockfile)" in listed.stderr


def test_list_json_shape(
    listed_mirror: Path, upstream_tree: UpstreamTree, _upstream_session_server: UpstreamServer
) -> None:
    listed = _list(listed_mirror, "--json")
    assert listed.exit_code == 0, listed.stderr
    report = json.loads(listed.stdout)
    assert list(report) == ["ok", "mirror", "upstream", "key", "repos"]  # the one --json envelope: ok first
    assert report["mirror"] == str(listed_mirror)
    assert report["upstream"] == {"url": _upstream_session_server.url, "source": "mirror", "reachable": True}
    assert report["key"] == {"fingerprints": [upstream_tree.key_fingerprint], "source": "mirror"}
    assert [r["repo"] for r in report["repos"]] == ["stable/deb/amd64", "experimental/deb/amd64"]
    assert report["repos"][1] == {
        "repo": "experimental/deb/amd64",
        "channel": "experimental",
        "format": "deb",
        "arch": "amd64",
        "upstream_error": None,
        "releases": [
            {
                "version": "1.20.0~rc.1-1",
                "upstream": True,
                "mirror": True,
                "locked": False,
                "release_candidate": True,
            }
        ],
    }
    assert [(r["version"], r["upstream"], r["mirror"]) for r in report["repos"][0]["releases"]] == [
        ("1.20.1-1", True, False),
        ("1.18.0-1", True, False),
        ("1.17.8-1", True, True),
    ]


def test_list_filters_by_channel_format_arch_and_version(listed_mirror: Path) -> None:
    ranged = _list(listed_mirror, "--channel", "stable", "--version", ">=1.18")
    assert ranged.exit_code == 0, ranged.stderr
    assert ranged.stdout.splitlines() == [
        "stable/deb/amd64",
        "  1.20.1-1  [upstream]",
        "  1.18.0-1  [upstream]",
    ]
    latest = _list(listed_mirror, "--channel", "stable", "--version", "latest")
    assert latest.stdout.splitlines() == ["stable/deb/amd64", "  1.20.1-1  [upstream]"]
    rpm = _list(listed_mirror, "--channel", "experimental", "--format", "rpm", "--arch", "arm64", "--json")
    assert rpm.exit_code == 0, rpm.stderr
    (repo,) = json.loads(rpm.stdout)["repos"]
    assert repo["repo"] == "experimental/rpm/aarch64"
    assert [(r["version"], r["upstream"], r["mirror"]) for r in repo["releases"]] == [
        ("1.20.0~rc.1-1", True, False)
    ]
    arm = _list(listed_mirror, "--arch", "arm64", "--channel", "stable", "--json")  # the format: the mirror's
    assert [r["repo"] for r in json.loads(arm.stdout)["repos"]] == ["stable/deb/arm64"]
    bad = _list(listed_mirror, "--version", "banana")
    assert bad.exit_code == ExitCode.USAGE and "invalid version selector 'banana'" in bad.stderr


def test_an_unreachable_upstream_is_said_and_the_mirrors_releases_are_listed(
    listed_mirror: Path, backoff: list[float]
) -> None:
    down = _closed_port()
    listed = _list(listed_mirror, "--upstream", down, "--channel", "stable")
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.splitlines() == ["stable/deb/amd64", "  1.17.8-1  [mirror]"]
    assert f"warning: upstream is not reachable (could not download {down}/stable/deb/amd64/" in listed.stderr
    assert "listing the mirror's releases only" in listed.stderr
    retries = len(backoff)
    assert retries > 0  # a refused connection is retried (without waiting here)
    both = _list(listed_mirror, "--upstream", down, "--json")
    report = json.loads(both.stdout)
    assert report["upstream"]["reachable"] is False
    assert [r["upstream"] for repo in report["repos"] for r in repo["releases"]] == [None, None]
    assert len(backoff) == 2 * retries  # asked once for the two repos: the first connection error stops it


def test_an_unreachable_upstream_and_no_mirror_is_a_network_error(backoff: list[float]) -> None:
    down = _closed_port()
    failed = run_cli("mirror", "list", "--upstream", down)
    assert failed.exit_code == ExitCode.NETWORK, failed.stderr
    assert f"could not download {down}/stable/deb/amd64/" in failed.stderr
    enveloped = run_cli("mirror", "list", "--upstream", down, "--json")
    error = json.loads(enveloped.stdout)
    assert error["ok"] is False and error["error"]["code"] == "network" and error["error"]["exit_code"] == 4


def test_offline_lists_the_mirror_and_needs_one(listed_mirror: Path) -> None:
    offline = _list(listed_mirror, "--offline", "--channel", "experimental")
    assert offline.exit_code == 0, offline.stderr
    assert offline.stdout.splitlines() == [
        "experimental/deb/amd64",
        "  1.20.0~rc.1-1  [mirror, release candidate]",
    ]
    refused = run_cli("mirror", "list", "--offline")
    assert refused.exit_code == ExitCode.USAGE
    assert "--offline lists the mirror's releases: name it with --mirror" in refused.stderr
