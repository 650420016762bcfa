"""Shared pytest fixtures: the local NVIDIA-like upstream (``upstream_tree``) and its server
(``upstream_server``), mirrors synced from it (``synced_mirror``, ``deb_mirror``) and throwaway gpg keys
(``test_key``, ``other_key``, the bundle operator's ``operator_key``)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from mirror.disk.trust import open_keyring
from plumbing import clock
from plumbing.gpg import Keyring
from tests import ramtemp
from tests.cli_runner import run_bundle_build, run_mirror_sync
from tests.gpgkeys import TestKey, make_key
from tests.live.cgroups import SHARED_CGROUPS, existing_cgroups, release_shared_cgroups
from tests.upstream import UpstreamServer, UpstreamTree, cached_upstream, stop_agent

# -- the two tiers and the order of the files ----------------------------------------------------

#: Modules whose every test is end-to-end (real dpkg/rpm installs into scratch roots, real apt, dnf,
#: ansible, containerd or registries, whole syncs and builds): marked ``slow``, so ``make check``
#: (``-m "not slow"``) leaves them to ``make test``. The first 19 took 62% of the time of the tests
#: not marked slow one by one; a module like them that lands later joins the list.
HEAVY_MODULES = frozenset(
    f"tests/test_{name}.py"
    for name in (
        "node_install",
        "mirror_sync",
        "fleet_k8s_rollout",
        "distros",
        "uninstall_resume",
        "install_sh",
        "node_install_faults",
        "mirror_replay",
        "fleet_ansible_transports",
        "bundle_build_safety",
        "mirror_switch",
        "node_hostile_folder",
        "node_rotation",
        "distros_install",
        "oci",
        "fleet_image",
        "bundle_trust",
        "publish",
        "publish_safety",
        "upstream_clients",
        "mirror_upstream",
        "snapshots",
        "fips",
        "node_not_root",
        "node_hints",
        "node_hold",
    )
)

#: The units pytest-xdist hands out (``make test``: ``--dist loadfile``) that are not whole files,
#: by node id prefix: the mirror-path tests of the fleet playbook share one costly module fixture
#: (``mirror_rollout``) and run apart from the rest of their file; the transport tests share none,
#: so each is a unit of its own (None). A test renamed out of a prefix still passes: it only
#: builds its fixture a second time on the other worker.
UNITS: dict[str, str | None] = {
    "tests/test_fleet_ansible.py::test_mirror_path_": "tests/test_fleet_ansible.py::mirror_rollout",
    "tests/test_fleet_ansible_transports.py::": None,
}

#: Seconds each unit took in one full run (2 workers, load average 3-9: only the ratios count;
#: a test of a None unit counts its prefix's figure). The units go to the workers in collection
#: order (``--no-loadscope-reorder``), so the longest start first and the short ones fill in at
#: the end: both workers finish together.
SECONDS = {
    "tests/test_fleet_ansible.py::mirror_rollout": 334,
    "tests/test_fleet_ansible.py": 325,
    "tests/test_fleet_k8s_rollout.py": 115,
    "tests/live/test_ansible_booted_node.py": 100,
    "tests/test_real_packages_cdi.py": 94,
    "tests/live/test_systemd_node.py": 81,
    "tests/test_real_packages.py": 67,
    "tests/test_nvidia_ctk_oracle.py": 63,
    "tests/test_fleet_ansible_transports.py::": 52,  # per test
    "tests/test_node_install.py": 50,
    "tests/test_mirror_sync.py": 35,
    "tests/test_full_disk.py": 35,
    "tests/live/test_image_uninstall.py": 31,
    "tests/test_uninstall_resume.py": 27,
    "tests/live/test_real_packages_booted.py": 26,
    "tests/test_readme_recipes.py": 75,  # measured by its author, not in that run
    "tests/test_demo.py": 25,
    "tests/test_install_sh.py": 23,
    "tests/test_real_packages_purge.py": 22,
    "tests/test_bench_peers.py": 20,
    "tests/live/test_cdi_devices.py": 18,
    "tests/test_oci.py": 16,
    "tests/test_fleet_k8s.py": 15,
    "tests/test_node_debootstrap.py": 14,
    "tests/test_fleet_podman.py": 14,
    "tests/test_recorded_paths.py": 14,
    "tests/live/test_podman_rootless.py": 13,
    "tests/test_cli_conventions.py": 13,
    "tests/test_node_install_faults.py": 13,
    # measured later, alone (load average 9-12), for modules that grew or landed after that run
    "tests/test_cli_vocabulary.py": 62,
    "tests/test_node_not_root.py": 39,
    "tests/test_snapshots.py": 29,
    "tests/test_node_hold.py": 25,
    "tests/test_node_systems.py": 17,
    "tests/test_cli_keys_and_json.py": 17,
    "tests/test_fips.py": 15,
    "tests/test_node_hints.py": 13,
}


def unit_of(nodeid: str) -> tuple[str, str]:
    """The unit of the test ``nodeid`` and the key of its figure in :data:`SECONDS`."""
    for prefix, unit in UNITS.items():
        if nodeid.startswith(prefix):
            return (unit or nodeid, unit or prefix)
    module = nodeid.split("::", 1)[0]
    return (module, module)


class _UnitScheduling(LoadScopeScheduling):
    """``--dist loadfile``, with the units of :data:`UNITS` instead of whole files where listed."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)[0]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: pytest -p no:xdist still runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    """Hand out :func:`unit_of` units for ``--dist loadfile`` (any other mode is pytest-xdist's own)."""
    return _UnitScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.hookimpl(tryfirst=True)  # before pytest's -m reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark :data:`HEAVY_MODULES` slow; put the longest units first (stable: the rest keep their order)."""
    for item in items:
        if item.nodeid.split("::", 1)[0] in HEAVY_MODULES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -SECONDS.get(unit_of(item.nodeid)[1], 0))


_SHARED_BEFORE = pytest.StashKey[set[Path]]()
_RAM_TEMP = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    """The controller notes which shared cgroups were there before the session (see below) and puts
    the session's temporary files on tmpfs where there is room (tests/ramtemp.py); the workers it
    starts later inherit both the ``--basetemp`` and the ``TMPDIR``."""
    if hasattr(config, "workerinput"):
        return
    config.stash[_SHARED_BEFORE] = existing_cgroups(SHARED_CGROUPS)
    if config.option.basetemp is None and ramtemp.has_room():
        base = ramtemp.start()
        config.option.basetemp = str(base / ramtemp.BASETEMP)
        config.stash[_RAM_TEMP] = base


def pytest_unconfigure(config: pytest.Config) -> None:
    """Once every worker is done: kill what the live tests left in the shared cgroups and remove them,
    then the session's temporary files on tmpfs.

    Not earlier: a test's cleanup there would hit the other worker's containers.
    """
    if _SHARED_BEFORE in config.stash:
        release_shared_cgroups(config.stash[_SHARED_BEFORE])
    if _RAM_TEMP in config.stash:
        left = ramtemp.finish(config.stash[_RAM_TEMP])
        if left:
            config.get_terminal_writer().line(f"warning: {left}", yellow=True)


@pytest.fixture(autouse=True)
def backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retry waits of this test, recorded instead of slept: no test spends real time on a back-off.

    Every in-process retry (the mirror's HTTP client, the registry client) waits through
    :func:`plumbing.clock.backoff`; a test that cares asks for this list and asserts on it.
    """
    waits: list[float] = []
    monkeypatch.setattr(clock, "backoff", waits.append)
    return waits


@pytest.fixture(scope="session")
def upstream_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamTree]:
    """The default local upstream, built once and cached by inputs (``$GPU_AIRGAP_TEST_CACHE`` or ~/.cache).

    Read-only: tests that tamper with files use ``tests.upstream.copy_upstream(tree, tmp_path / "site")``.
    Set ``GPU_AIRGAP_TEST_CACHE=`` (empty) to build into the session's tmp dir instead.
    """
    cache = os.environ.get("GPU_AIRGAP_TEST_CACHE")
    cache_dir = (
        Path(cache)
        if cache
        else (
            tmp_path_factory.mktemp("upstream-cache")
            if cache == ""
            else Path.home() / ".cache" / "gpu-airgap-tests"
        )
    )
    tree = cached_upstream(cache_dir)
    # Re-signing starts a gpg-agent for the GNUPGHOME; each session (each xdist worker) signs with a
    # copy of its own, so stopping that agent at the end cannot cut off another session's signing.
    home = tmp_path_factory.mktemp("upstream-gnupg") / "gnupg"
    shutil.copytree(tree.gnupghome, home, ignore=shutil.ignore_patterns("S.*", "*.lock", ".#*"))
    yield dataclasses.replace(tree, gnupghome=home)
    stop_agent(home)


@pytest.fixture(scope="session")
def _upstream_session_server(upstream_tree: UpstreamTree) -> Iterator[UpstreamServer]:
    with UpstreamServer(upstream_tree.root) as server:
        yield server


@pytest.fixture
def upstream_server(_upstream_session_server: UpstreamServer) -> Iterator[UpstreamServer]:
    """A server on 127.0.0.1 serving ``upstream_tree``, with no faults and an empty log for this test."""
    _upstream_session_server.reset()
    yield _upstream_session_server
    # Faults this test injected must not reach session fixtures that use the server directly.
    _upstream_session_server.reset()


def _sync(tree: UpstreamTree, server: UpstreamServer, dest: Path, formats: str, *extra: str) -> Path:
    result = run_mirror_sync(dest, server.url, tree.public_key, "--quiet", *extra, fmt=formats)
    assert result.exit_code == 0, result.stderr
    return dest


@pytest.fixture(scope="session")
def synced_mirror(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A mirror synced with the real ``mirror sync``: 1.17.8, deb/amd64 + rpm/x86_64, with its ``gpu-airgap.lock``.

    Read-only, like :func:`deb_mirror`.
    """
    dest = tmp_path_factory.mktemp("mirror")
    return _sync(
        upstream_tree,
        _upstream_session_server,
        dest,
        "deb,rpm",
        "--write-lock",
        str(dest / "gpu-airgap.lock"),
    )


@pytest.fixture(scope="session")
def deb_mirror(
    upstream_tree: UpstreamTree,
    _upstream_session_server: UpstreamServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A mirror synced with the real ``mirror sync``: 1.17.8, deb/amd64 only.

    Read-only: tests that tamper with it work on a ``shutil.copytree`` of it.
    """
    return _sync(upstream_tree, _upstream_session_server, tmp_path_factory.mktemp("deb-mirror"), "deb")


@pytest.fixture(scope="session")
def test_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKey]:
    """A throwaway signing key the signature tests trust."""
    key = make_key(tmp_path_factory.mktemp("gpg-a"), "gpu-airgap test <test@example.invalid>")
    yield key
    stop_agent(key.home)


@pytest.fixture(scope="module")
def nvidia() -> Iterator[Keyring]:
    """NVIDIA's pinned public key, in a throwaway GNUPGHOME (what ``mirror sync`` trusts by default)."""
    with open_keyring() as keyring:
        yield keyring


@pytest.fixture()
def trusting(test_key: TestKey) -> Iterator[Keyring]:
    """A keyring holding only ``test_key``."""
    with Keyring.open([test_key.public]) as keyring:
        yield keyring


@pytest.fixture(scope="session")
def other_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKey]:
    """A second key nobody trusts."""
    key = make_key(tmp_path_factory.mktemp("gpg-b"), "someone else <other@example.invalid>")
    yield key
    stop_agent(key.home)


@pytest.fixture(scope="session")
def operator_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKey]:
    """The bundle operator's throwaway signing key (ed25519, no passphrase, its own GNUPGHOME)."""
    key = make_key(tmp_path_factory.mktemp("operator-gpg"), "bundle operator <operator@example.invalid>")
    yield key
    stop_agent(key.home)


@pytest.fixture(scope="session")
def past_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKey]:
    """An operator key made two days ago: it can sign publishes dated in the past (SOURCE_DATE_EPOCH)."""
    created = int(time.time()) - 2 * 86400
    key = make_key(
        tmp_path_factory.mktemp("past-gpg"), "past operator <past@example.invalid>", created=created
    )
    yield key
    stop_agent(key.home)


@pytest.fixture(scope="session")
def rotation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestKey, TestKey]]:
    """The old and the new operator key, both secret keys in one gpg home (the operator's)."""
    home = tmp_path_factory.mktemp("rotation-gpg")
    old = make_key(home, "old operator <old@example.invalid>")
    new_home = tmp_path_factory.mktemp("rotation-new")
    new = make_key(new_home, "new operator <new@example.invalid>")
    secret = subprocess.run(
        ["gpg", "--homedir", str(new_home), "--batch", "--export-secret-keys", new.fingerprint],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--import"], input=secret, capture_output=True, check=True
    )
    yield old, TestKey(home, new.fingerprint, new.public)
    stop_agent(home)
    stop_agent(new_home)


@pytest.fixture(scope="session", autouse=True)
def _node_zipapp_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Zipapps run by tests extract into a session temp dir, not the machine's /var/cache/gpu-airgap."""
    previous = os.environ.get("GPU_AIRGAP_NODE_CACHE")
    os.environ["GPU_AIRGAP_NODE_CACHE"] = str(tmp_path_factory.mktemp("node-zipapp-cache"))
    yield
    if previous is None:
        os.environ.pop("GPU_AIRGAP_NODE_CACHE", None)
    else:
        os.environ["GPU_AIRGAP_NODE_CACHE"] = previous


# -- a signed bundle (install.sh, fleet rollout) ------------------------------------------------------


@pytest.fixture(scope="session")
def deb_bundle(deb_mirror: Path, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A signed zstd deb/amd64 bundle of 1.17.8, built by ``bundle build`` from a real ``mirror sync``. Read-only."""
    out = tmp_path_factory.mktemp("deb-bundle") / "nvct-1.17.8.tar.zst"
    built = run_bundle_build(deb_mirror, operator_key, out)
    assert built.exit_code == 0, built.stderr
    return out


@pytest.fixture(scope="session")
def dual_bundle(
    deb_mirror: Path, rotation: tuple[TestKey, TestKey], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The same bundle signed by the old and the new operator key (``--sign-key OLD --sign-key NEW``). Read-only."""
    old, new = rotation
    out = tmp_path_factory.mktemp("dual-bundle") / "nvct-1.17.8.tar.zst"
    built = run_bundle_build(deb_mirror, old, out, "--sign-key", new.fingerprint)
    assert built.exit_code == 0, built.stderr
    return out


@pytest.fixture(scope="session")
def split_bundle(
    upstream_tree: UpstreamTree, operator_key: TestKey, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A zstd bundle built with ``--split 1M`` (the smallest part size) from packages padded to 1 MiB: 5 parts.

    Parts must be that large for zstd to decode a wrong part before its checksum is checked at its end.
    """
    cache = upstream_tree.root.parent.parent  # the session's cache directory (see conftest.upstream_tree)
    tree = cached_upstream(
        cache, payload_mb=1.0, stable_versions=("1.17.8-1",), experimental_versions=("1.20.0~rc.1-1",)
    )
    work = tmp_path_factory.mktemp("split-bundle")
    with UpstreamServer(tree.root) as server:
        synced = run_mirror_sync(work / "mirror", server.url, tree.public_key, "--quiet")
    assert synced.exit_code == 0, synced.stderr
    (work / "out").mkdir()
    built = run_bundle_build(work / "mirror", operator_key, work / "out" / "nvct.tar.zst", "--split", "1M")
    assert built.exit_code == 0, built.stderr
    assert len(list((work / "out").glob("nvct.tar.zst.part*"))) >= 4
    return work / "out"
