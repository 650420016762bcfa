"""Issue 25 item 4: a mirror remembers its upstream and key; switching either needs --replace-upstream.

Real ``mirror sync`` / ``status`` runs against the loopback upstream; a second server on the same
tree stands in for another upstream (a proxy), ``other_key`` for another key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.disk import store
from mirror.disk.trust import NVIDIA_FINGERPRINT
from plumbing.errors import ExitCode
from tests.cli_runner import CliResult, run_bundle_build, run_cli, run_mirror_sync
from tests.gpgkeys import TestKey
from tests.upstream import (
    UpstreamServer,
    UpstreamTree,
    copy_upstream,
    make_wrong_key,
    resign_inrelease,
    stop_agent,
)


def _sync(dest: Path, *args: str) -> CliResult:
    return run_cli(
        "mirror",
        "sync",
        "--dest",
        str(dest),
        "--version",
        "1.17.8",
        "--format",
        "deb",
        "--arch",
        "amd64",
        *args,
    )


@pytest.fixture
def other_server(upstream_tree: UpstreamTree) -> Iterator[UpstreamServer]:
    """Another upstream URL serving the same signed tree (a proxy of the first)."""
    with UpstreamServer(upstream_tree.root) as server:
        yield server


@pytest.fixture
def mirror(upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path) -> Path:
    """A mirror synced once with --upstream and --keyring given."""
    dest = tmp_path / "mirror"
    synced = _sync(dest, "--upstream", upstream_server.url, "--keyring", str(upstream_tree.public_key))
    assert synced.exit_code == 0, synced.stderr
    assert (
        f"upstream {upstream_server.url} (--upstream), key {upstream_tree.key_fingerprint} (--keyring)"
        in synced.stderr
    )
    return dest


def test_a_resync_without_flags_uses_the_recorded_upstream_and_key(
    mirror: Path, upstream_tree: UpstreamTree, upstream_server: UpstreamServer
) -> None:
    state = store.MirrorState.load(mirror)
    assert state.key_fingerprints == (upstream_tree.key_fingerprint,) and "PGP PUBLIC KEY" in state.key
    before = len(upstream_server.log)
    again = _sync(mirror, "--json")
    assert again.exit_code == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["upstream"] == {"url": upstream_server.url, "source": "mirror"}
    assert report["key"] == {"fingerprints": [upstream_tree.key_fingerprint], "source": "mirror"}
    assert len(upstream_server.log) > before  # it asked the recorded upstream, not NVIDIA
    plain = _sync(mirror)
    assert (
        f"upstream {upstream_server.url} (recorded in the mirror), key {upstream_tree.key_fingerprint} "
        "(recorded in the mirror)"
    ) in plain.stderr


def test_status_checks_upstream_with_the_recorded_key(mirror: Path, upstream_tree: UpstreamTree) -> None:
    status = run_cli("mirror", "status", "--mirror", str(mirror))
    assert status.exit_code == 0, status.stderr
    assert (
        f"checking upstream with key {upstream_tree.key_fingerprint} (recorded in the mirror)"
        in status.stderr
    )
    assert "upstream not checked" not in status.stdout
    assert status.stdout.strip().endswith("; newer upstream: 1.20.1-1"), status.stdout
    report = json.loads(run_cli("mirror", "status", "--mirror", str(mirror), "--json").stdout)
    assert report["key"] == {"fingerprints": [upstream_tree.key_fingerprint], "source": "mirror"}
    assert report["repos"][0]["error"] is None and report["repos"][0]["upstream_latest"] == "1.20.1-1"


def test_a_sync_to_another_upstream_is_refused_naming_both(
    mirror: Path, upstream_server: UpstreamServer, other_server: UpstreamServer
) -> None:
    before = store.state_path(mirror).read_bytes()
    refused = _sync(mirror, "--upstream", other_server.url)
    assert refused.exit_code == ExitCode.USAGE, refused.stderr
    assert f"was synced from {upstream_server.url} (key " in refused.stderr
    assert f"this sync would use {other_server.url} (key " in refused.stderr
    assert "pass --replace-upstream to switch it" in refused.stderr
    assert store.state_path(mirror).read_bytes() == before and not other_server.log


def test_a_sync_with_another_key_is_refused_naming_both(
    mirror: Path, upstream_tree: UpstreamTree, other_key: TestKey
) -> None:
    refused = _sync(mirror, "--keyring", str(other_key.public))
    assert refused.exit_code == ExitCode.USAGE, refused.stderr
    assert f"(key {upstream_tree.key_fingerprint}) and this sync would use" in refused.stderr
    assert f"(key {other_key.fingerprint}): pass --replace-upstream" in refused.stderr


def test_replace_upstream_switches_the_mirror_and_later_syncs_follow_it(
    mirror: Path, upstream_server: UpstreamServer, other_server: UpstreamServer, tmp_path: Path
) -> None:
    switched = _sync(mirror, "--upstream", other_server.url, "--replace-upstream")
    assert switched.exit_code == 0, switched.stderr
    state = store.MirrorState.load(mirror)
    assert state.upstream == other_server.url
    assert state.repos[0].base_url.startswith(other_server.url)
    upstream_server.reset()
    again = _sync(mirror)
    assert again.exit_code == 0 and f"upstream {other_server.url} (recorded in the mirror)" in again.stderr
    assert not upstream_server.log


def test_the_lockfile_upstream_is_used_and_a_flag_overrides_it(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, other_server: UpstreamServer, tmp_path: Path
) -> None:
    lock = tmp_path / "gpu-airgap.lock"
    keyring = ("--keyring", str(upstream_tree.public_key))
    first = _sync(tmp_path / "a", "--upstream", upstream_server.url, *keyring, "--write-lock", str(lock))
    assert first.exit_code == 0, first.stderr
    locked = run_cli(
        "mirror", "sync", "--dest", str(tmp_path / "b"), "--locked", str(lock), *keyring, "--json"
    )
    assert locked.exit_code == 0, locked.stderr
    assert json.loads(locked.stdout)["upstream"] == {"url": upstream_server.url, "source": "lockfile"}
    flagged = run_cli(
        "mirror",
        "sync",
        "--dest",
        str(tmp_path / "c"),
        "--locked",
        str(lock),
        *keyring,
        "--upstream",
        other_server.url,
        "--json",
    )
    assert flagged.exit_code == 0, flagged.stderr
    assert json.loads(flagged.stdout)["upstream"] == {"url": other_server.url, "source": "flag"}


def test_an_older_mirror_without_a_recorded_key_refuses_nvidias_key_for_its_own(
    mirror: Path, upstream_tree: UpstreamTree
) -> None:
    raw = json.loads(store.state_path(mirror).read_text())
    del raw["key_fingerprints"], raw["key"]
    store.state_path(mirror).write_text(json.dumps(raw))
    refused = _sync(mirror)
    assert refused.exit_code == ExitCode.USAGE, refused.stderr
    assert (
        f"(key {upstream_tree.key_fingerprint}) and this sync would use" in refused.stderr
        and f"(key {NVIDIA_FINGERPRINT}): pass --replace-upstream to switch it, or pass --keyring with the key "
        "file it was synced with"
        in refused.stderr
    )
    healed = _sync(mirror, "--keyring", str(upstream_tree.public_key))
    assert healed.exit_code == 0, healed.stderr
    assert store.MirrorState.load(mirror).key_fingerprints == (upstream_tree.key_fingerprint,)


def test_a_locked_sync_whose_keyring_lacks_the_lockfiles_key_is_refused_before_fetching(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path
) -> None:
    lock = tmp_path / "gpu-airgap.lock"
    first = run_mirror_sync(
        tmp_path / "a", upstream_server.url, upstream_tree.public_key, "--write-lock", str(lock)
    )
    assert first.exit_code == 0, first.stderr
    upstream_server.reset()
    refused = run_cli("mirror", "sync", "--dest", str(tmp_path / "b"), "--locked", str(lock))
    assert refused.exit_code == ExitCode.USAGE, refused.stderr
    assert (
        f"the lockfile's packages are signed by key {upstream_tree.key_fingerprint}, which the keyring "
        f"{NVIDIA_FINGERPRINT} (the default) does not hold: pass --keyring with that key"
    ) in refused.stderr
    assert not upstream_server.log and not (tmp_path / "b").exists()


def test_publish_preserve_upstream_checks_with_the_recorded_key(
    upstream_tree: UpstreamTree, upstream_server: UpstreamServer, tmp_path: Path
) -> None:
    dest = tmp_path / "full"
    synced = run_mirror_sync(
        dest, upstream_server.url, upstream_tree.public_key, "--quiet", version="all", arch=None
    )
    assert synced.exit_code == 0, synced.stderr
    published = run_cli(
        "mirror",
        "publish",
        "--mirror",
        str(dest),
        "--output",
        str(tmp_path / "web"),
        "--base-url",
        "http://repo.example/nvct",
        "--preserve-upstream",
        "--json",
    )
    assert published.exit_code == 0, published.stderr
    report = json.loads(published.stdout)
    assert report["preserved_upstream"] and report["signer"] == upstream_tree.key_fingerprint


def test_replace_upstream_names_the_repos_it_did_not_sync_again(
    mirror: Path, upstream_server: UpstreamServer, other_server: UpstreamServer
) -> None:
    rc = run_cli("mirror", "sync", "--dest", str(mirror), "--channel", "experimental", "--format", "deb")
    assert rc.exit_code == 0, rc.stderr
    switched = _sync(mirror, "--upstream", other_server.url, "--replace-upstream")
    assert switched.exit_code == 0, switched.stderr
    assert (
        "warning: experimental/deb/amd64 still hold what the replaced upstream or key gave; "
        "sync them again to replace it"
    ) in switched.stderr
    state = store.MirrorState.load(mirror)
    assert {r.key: r.base_url.startswith(other_server.url) for r in state.repos} == {
        "stable/deb/amd64": True,
        "experimental/deb/amd64": False,
    }


def test_a_key_switch_with_replace_upstream_leaves_a_mirror_that_checks_and_builds_with_the_new_key(
    mirror: Path, upstream_tree: UpstreamTree, operator_key: TestKey, tmp_path: Path
) -> None:
    """Upstream re-signed by another key (a rotation): refused, then accepted with --replace-upstream."""
    site = copy_upstream(upstream_tree, tmp_path / "site")
    rotated = make_wrong_key(tmp_path / "rotated-gnupg")
    resign_inrelease(site, site.root / "stable/deb/amd64", key=rotated)
    stop_agent(rotated.gnupghome)
    new_key = tmp_path / "rotated.asc"
    new_key.write_bytes(rotated.public_key_armored())
    with UpstreamServer(site.root) as server:
        flags = ("--upstream", server.url, "--keyring", str(new_key))
        refused = _sync(mirror, *flags)
        assert refused.exit_code == ExitCode.USAGE and f"(key {rotated.fingerprint})" in refused.stderr
        switched = _sync(mirror, *flags, "--replace-upstream")
        assert switched.exit_code == 0, switched.stderr
        state = store.MirrorState.load(mirror)
        assert state.key_fingerprints == (rotated.fingerprint,)
        assert state.repos[0].provenance.fingerprint == rotated.fingerprint
        status = run_cli("mirror", "status", "--mirror", str(mirror))
        assert status.exit_code == 0 and "upstream not checked" not in status.stdout, status.stdout
        assert f"checking upstream with key {rotated.fingerprint} (recorded in the mirror)" in status.stderr
    built = run_bundle_build(mirror, operator_key, tmp_path / "b.tar.zst", "--json", version=None)
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["toolkit_version"] == "1.17.8"


@pytest.mark.parametrize("damage", ["not a key", "another key"])
def test_a_damaged_recorded_key_is_named_as_the_mirrors(
    mirror: Path, other_key: TestKey, upstream_tree: UpstreamTree, damage: str
) -> None:
    raw = json.loads(store.state_path(mirror).read_text())
    raw["key"] = "garbage\n" if damage == "not a key" else other_key.public.read_text()
    store.state_path(mirror).write_text(json.dumps(raw))
    refused = _sync(mirror)
    assert refused.exit_code == ExitCode.ERROR, refused.stderr
    detail = "records is not a key" if damage == "not a key" else "holds is not the one it records"
    assert (
        f"the mirror is not a usable gpu-airgap mirror: the upstream key its state.json {detail}; pass --keyring"
        in refused.stderr
    )
    assert "/tmp/" not in refused.stderr.split("state.json", 1)[1]
    assert _sync(mirror, "--keyring", str(upstream_tree.public_key)).exit_code == 0  # the way out it names
