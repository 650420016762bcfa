"""No half-installed node: what install cannot finish it refuses before any package, or undoes, or records.

Every check ``--dry-run`` can make (configs parse, every file the run writes can be written: immutable
flag, read-only mount, directory permissions) runs before the packages; a later failure (a write that
still fails, dpkg, the CDI spec, a kill) rolls back what the run did, or leaves a record that
``status`` shows and ``uninstall`` removes. The faults are real: ``chattr +i``, a bind mount
remounted read-only, root without CAP_DAC_OVERRIDE, a SIGKILL.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from configure.cdi.spec import plan_spec
from configure.engine import ConfigPlan
from installer.env import NodeEnv
from installer.install import install
from installer.manage import status, uninstall
from installer.plan import InstallOptions
from installer.state import load_state
from installer.target import StagedTarget
from plumbing.errors import ExitCode, ToolError
from tests.cli_runner import install_argv, run_cli
from tests.fs_faults import (
    GPU_AIRGAP,
    WITHOUT_DAC_OVERRIDE,
    chattr_capable,
    dpkg_killing_its_caller,
    have_tools,
    immutable,
    is_root,
    read_only_mount,
)
from tests.gpgkeys import TestKey
from tests.node_fixtures import (
    CONTAINERD_CONFIG,
    TOOLKIT,
    build_target,
    dpkg_versions,
    seed_containerd_node,
    tree_digest,
    write_signed_bundle,
)

needs_root = pytest.mark.skipif(
    not is_root(), reason="real filesystem faults (chattr, mount, setpriv) need root"
)
DAEMON_JSON = b'{\n    "log-level": "warn"\n}\n'


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, StagedTarget]:
    out = tmp_path_factory.mktemp("fault-packages")
    return {v: build_target(out / v, "deb", f"{v}-1", "amd64") for v in ("1.17.7", "1.17.8")}


@pytest.fixture(scope="module")
def bundles(
    debs: Dict[str, StagedTarget], test_key: TestKey, tmp_path_factory: pytest.TempPathFactory
) -> Dict[str, Path]:
    out = tmp_path_factory.mktemp("fault-bundles")
    return {
        v: write_signed_bundle(out / f"{v}.tar", [t], test_key.home, test_key.fingerprint)
        for v, t in debs.items()
    }


@pytest.fixture()
def node(tmp_path: Path) -> Iterator[Path]:
    """A Debian-like scratch root with containerd's config, on a filesystem where chattr works."""
    with chattr_capable(tmp_path) as where:
        yield seed_containerd_node(where / "root")


class Services:
    def restart(self, unit: str) -> None:
        raise AssertionError(f"no engine is restarted under another root ({unit})")

    def is_active(self, unit: str) -> bool:
        raise AssertionError(unit)

    def is_stopped(self, unit: str) -> bool:
        raise AssertionError(unit)


def _cli_install(bundle: Path, key: TestKey, root: Path, *extra: str) -> Tuple[int, List[str]]:
    result = run_cli(*install_argv(bundle, key, root, *extra))
    return result.exit_code, [
        line for line in result.stderr.splitlines() if line.startswith("gpu-airgap: error:")
    ]


def _refused_before_anything(
    root: Path, before: Dict[str, str], code: int, errors: List[str], sentence: str
) -> None:
    assert code == ExitCode.CONFIG, errors
    assert len(errors) == 1 and sentence in errors[0], errors
    assert tree_digest(root) == before  # the dpkg database, the configs, no state.json, no staging left
    assert dpkg_versions(root) == {}


# -- 1. Refused before any package: every check --dry-run can make ------------------------------------


def test_invalid_toml_in_containerd_config_stops_install_before_any_package(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    (node / "etc/containerd/config.toml").write_text("version = 2\n[plugins\n")
    before = tree_digest(node)
    code, errors = _cli_install(bundles["1.17.8"], test_key, node)
    _refused_before_anything(node, before, code, errors, "config.toml: is not valid TOML")


def test_invalid_json_in_daemon_json_stops_install_before_containerd_or_any_package(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    (node / "etc/docker").mkdir()
    (node / "etc/docker/daemon.json").write_text('{"log-level": \n')
    before = tree_digest(node)
    code, errors = _cli_install(bundles["1.17.8"], test_key, node, "--runtime", "auto")
    _refused_before_anything(node, before, code, errors, "daemon.json: is not valid JSON")


def test_an_invalid_cdi_spec_with_cdi_on_stops_install_before_any_package(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    # The spec is written after the packages (nvidia-ctk comes with them), but it is read before.
    _with_driver(node)
    (node / "etc/cdi").mkdir()
    (node / "etc/cdi/nvidia.yaml").write_text('{"cdiVersion": \n')
    before = tree_digest(node)
    code, errors = _cli_install(bundles["1.17.8"], test_key, node, "--cdi", "on")
    _refused_before_anything(node, before, code, errors, "nvidia.yaml: the existing CDI spec is invalid")


@needs_root
def test_immutable_containerd_config_stops_install_and_its_dry_run_before_any_package(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    config = node / "etc/containerd/config.toml"
    with immutable(config):
        before = tree_digest(node)
        dry_code, dry_errors = _cli_install(bundles["1.17.8"], test_key, node, "--dry-run")
        _refused_before_anything(node, before, dry_code, dry_errors, "is immutable (chattr +i)")
        code, errors = _cli_install(bundles["1.17.8"], test_key, node)
        _refused_before_anything(
            node, before, code, errors, f"{config}: cannot be changed: it is immutable (chattr +i)"
        )


@needs_root
def test_containerd_config_on_a_read_only_mount_stops_install_before_any_package(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    with read_only_mount(node / "etc/containerd"):
        before = tree_digest(node)
        code, errors = _cli_install(bundles["1.17.8"], test_key, node)
        _refused_before_anything(
            node, before, code, errors, "config.toml: cannot be written: it is on a read-only filesystem"
        )


@needs_root
def test_a_root_mounted_read_only_as_a_whole_is_one_sentence_for_install_and_its_dry_run(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    # Not even the private staging directory can be made: refused before the bundle is read.
    with read_only_mount(node):
        before = tree_digest(node)
        for extra in ([], ["--dry-run"]):
            code, errors = _cli_install(bundles["1.17.8"], test_key, node, *extra)
            _refused_before_anything(
                node,
                before,
                code,
                errors,
                "var/lib/gpu-airgap: cannot be written: it is on a read-only filesystem",
            )


@needs_root
@pytest.mark.skipif(not have_tools("setpriv"), reason="needs setpriv (util-linux)")
def test_containerd_config_in_a_read_only_directory_stops_install_before_any_package(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    # Root passes every permission check, so the install runs as root without CAP_DAC_OVERRIDE:
    # the 0555 directory is then as read-only for it as for any admin without that privilege.
    directory = node / "etc/containerd"
    directory.chmod(0o555)
    try:
        before = tree_digest(node)
        argv = [*WITHOUT_DAC_OVERRIDE, *GPU_AIRGAP, *install_argv(bundles["1.17.8"], test_key, node)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        errors = [line for line in done.stderr.splitlines() if line.startswith("gpu-airgap: error:")]
        _refused_before_anything(
            node, before, done.returncode, errors, f"the directory {directory} is not writable (mode 0555)"
        )
    finally:
        directory.chmod(0o755)


@needs_root
def test_runtime_auto_checks_every_engine_before_reconfiguring_any(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    # Docker comes after containerd: its immutable daemon.json must stop the run before containerd is touched.
    (node / "etc/docker").mkdir()
    daemon = node / "etc/docker/daemon.json"
    daemon.write_bytes(DAEMON_JSON)
    with immutable(daemon):
        before = tree_digest(node)
        code, errors = _cli_install(bundles["1.17.8"], test_key, node, "--runtime", "auto")
        _refused_before_anything(
            node, before, code, errors, "daemon.json: cannot be changed: it is immutable (chattr +i)"
        )
    assert (node / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG


# -- 1. Undone after the packages: a write that still fails, the package manager, CDI -------------------


def _with_driver(root: Path) -> None:
    for stand_in in ("proc/driver/nvidia/version", "dev/nvidiactl", "dev/nvidia0"):
        (root / stand_in).parent.mkdir(parents=True, exist_ok=True)
        (root / stand_in).write_text("stand-in\n")


def _only_configs(root: Path) -> Dict[str, str]:
    """The tree without dpkg's database (dpkg keeps -old copies after an install and a removal)."""
    return {p: d for p, d in tree_digest(root).items() if not p.startswith("var/lib/dpkg")}


@needs_root
def test_a_config_write_that_fails_after_the_packages_rolls_back_packages_spec_and_journal(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    # The config turns immutable between planning and writing (another admin, a config manager):
    # the CDI spec was written and the packages are in by then; all of it is undone.
    _with_driver(node)
    before = _only_configs(node)
    config = node / "etc/containerd/config.toml"
    locked: List[Path] = []

    def cdi_then_lock(root: Path) -> ConfigPlan:
        subprocess.run(["chattr", "+i", str(config)], check=True)
        locked.append(config)
        return plan_spec(root)

    env = NodeEnv(services=Services(), cdi=cdi_then_lock)
    try:
        with pytest.raises(ToolError) as info:
            install(bundles["1.17.8"], test_key.public, InstallOptions(root=node), env)
    finally:
        for path in locked:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    message = str(info.value)
    assert f"{config}: cannot be changed" in message and "the install was rolled back" in message
    assert "removed nvidia-container-toolkit" in message and "\n" not in message
    assert info.value.exit_code == ExitCode.CONFIG
    assert dpkg_versions(node) == {}
    assert load_state(node) is None
    assert _only_configs(node) == before  # no spec, no journal, no backups, no staging


def test_a_failing_cdi_spec_with_cdi_on_rolls_back_the_packages_and_the_hold(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    _with_driver(node)
    before = _only_configs(node)

    def broken(root: Path) -> ConfigPlan:
        raise ToolError("nvidia-ctk produced an invalid CDI spec: no devices")

    env = NodeEnv(services=Services(), cdi=broken)
    with pytest.raises(
        ToolError, match=r"invalid CDI spec: no devices; the install was rolled back \("
    ) as info:
        install(bundles["1.17.8"], test_key.public, InstallOptions(root=node, cdi="on", hold=True), env)
    assert "released the hold" in str(info.value)
    assert dpkg_versions(node) == {}
    selections = subprocess.run(
        ["dpkg", f"--root={node}", "--get-selections", *TOOLKIT], capture_output=True, text=True
    ).stdout
    assert "hold" not in selections.split()
    assert load_state(node) is None and _only_configs(node) == before


def test_a_failing_dpkg_run_leaves_no_record_and_no_config_change(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    # A file that belongs to another package makes dpkg refuse the toolkit part-way.
    (node / "var/lib/dpkg/info/intruder.list").write_text("/usr/bin/nvidia-container-runtime-hook\n")
    with (node / "var/lib/dpkg/status").open("a") as status_file:
        status_file.write(
            "\nPackage: intruder\nStatus: install ok installed\nMaintainer: x <x@example.invalid>\nArchitecture: amd64\nVersion: 1\nDescription: x\n"
        )
    (node / "usr/bin").mkdir(parents=True)
    (node / "usr/bin/nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    before = _only_configs(node)
    code, errors = _cli_install(bundles["1.17.8"], test_key, node)
    assert code == ExitCode.ERROR and len(errors) == 1 and "dpkg" in errors[0]
    assert dpkg_versions(node) == {} and load_state(node) is None
    assert _only_configs(node) == before


def test_an_upgrade_that_fails_after_the_packages_is_recorded_so_status_shows_it_and_uninstall_removes_it(
    node: Path, bundles: Dict[str, Path], test_key: TestKey
) -> None:
    # The older release's packages are not in the bundle, so an upgrade cannot be taken back: the
    # node keeps a record of what it has, status says the run did not finish, uninstall clears it.
    env = NodeEnv(services=Services())
    install(bundles["1.17.7"], test_key.public, InstallOptions(root=node), env)
    _with_driver(node)

    def broken(root: Path) -> ConfigPlan:
        raise ToolError("nvidia-ctk failed")

    with pytest.raises(ToolError, match="nvidia-ctk failed; the install was rolled back") as info:
        install(
            bundles["1.17.8"],
            test_key.public,
            InstallOptions(root=node, cdi="on"),
            dataclasses.replace(env, cdi=broken),
        )
    assert "nvidia-container-toolkit 1.17.8-1" in str(info.value)
    assert "stay (the older packages are not in the bundle): see `gpu-airgap status`" in str(info.value)
    assert dpkg_versions(node) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    report = status(node, env)
    assert any("did not finish" in p for p in report["problems"]), report["problems"]
    uninstall(node, env)
    assert dpkg_versions(node) == {} and load_state(node) is None
    assert (node / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG


# -- 1 and 5. Killed: recorded for status and uninstall; its staging directory cleaned by the next run ---


@needs_root
def test_an_install_killed_after_dpkg_is_recorded_and_its_staging_is_cleaned_by_the_next_run(
    node: Path, bundles: Dict[str, Path], test_key: TestKey, tmp_path: Path
) -> None:
    # dpkg is the real one, wrapped so that it SIGKILLs the installer the moment the packages are in.
    env = dpkg_killing_its_caller(tmp_path / "bin", "--install")
    argv = [*GPU_AIRGAP, *install_argv(bundles["1.17.8"], test_key, node)]
    killed = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert dpkg_versions(node) == dict.fromkeys(TOOLKIT, "1.17.8-1")
    state_dir = node / "var/lib/gpu-airgap"
    assert list(state_dir.glob("staging-*")), "the kill leaves its staging directory behind"

    shown = run_cli("status", "--root", str(node), "--json")
    assert shown.exit_code == ExitCode.PROBLEMS_FOUND
    problems = json.loads(shown.stdout)["problems"]
    assert any("did not finish" in p and "gpu-airgap uninstall" in p for p in problems), problems

    dry = run_cli(
        "install", str(bundles["1.17.8"]), "--keyring", str(test_key.public), "--root", str(node), "--dry-run"
    )
    assert dry.exit_code == 0, dry.stderr
    assert not list(state_dir.glob("staging-*")), "the next run removes the stale staging directory"

    removed = run_cli("uninstall", "--root", str(node))
    assert removed.exit_code == 0, removed.stderr
    assert "removed nvidia-container-toolkit" in removed.stdout
    assert dpkg_versions(node) == {} and load_state(node) is None
    assert (node / "etc/containerd/config.toml").read_bytes() == CONTAINERD_CONFIG


def test_stale_staging_is_removed_by_the_next_run_but_never_while_another_run_holds_the_lock(
    node: Path, bundles: Dict[str, Path], test_key: TestKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir = node / "var/lib/gpu-airgap"
    stale = state_dir / "staging-killed"
    (stale / "targets").mkdir(parents=True)
    (stale / "targets/pkg.deb").write_bytes(b"left by a run that was killed")
    monkeypatch.setenv("GPU_AIRGAP_LOCK_WAIT", "0")  # refuse at once instead of waiting for the holder
    holder = os.open(node, os.O_RDONLY)  # the node lock: another gpu-airgap process, mid-run
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        busy = run_cli(
            *install_argv(bundles["1.17.8"], test_key, node),
            "--dry-run",
        )
        assert busy.exit_code == ExitCode.BUSY and stale.is_dir()
    finally:
        os.close(holder)
    done = run_cli(
        "install", str(bundles["1.17.8"]), "--keyring", str(test_key.public), "--root", str(node), "--dry-run"
    )
    assert done.exit_code == 0, done.stderr
    assert not stale.exists() and not list(state_dir.glob("staging-*"))
