"""``configure lxc``: an unprivileged container started with ``lxc-start`` runs LXC's own nvidia hook.

The container config gpu-airgap edited is the one ``lxc-start -P`` reads; the hook is Debian's
``/usr/share/lxc/hooks/nvidia`` from the lxc package, and it calls ``nvidia-container-cli`` (a
stand-in that records its arguments: the real one needs a driver) with the devices and
capabilities of the environment lines we added. Without our lines (reverted, privileged, or a
``void`` device list) the hook never calls it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.live import lxc, nvidia
from tests.live.daemons import short_dir

pytestmark = pytest.mark.slow

LXCPATH = "/var/lib/lxc"


@pytest.fixture
def node() -> Iterator[Path]:
    """A node root the container's mapped root can traverse (a pytest tmp_path is root's alone)."""
    reason = lxc.missing_reason()
    if reason:
        pytest.skip(reason)
    directory = short_dir("lxc")
    directory.chmod(0o755)
    (directory / "usr/share/lxc/hooks").mkdir(parents=True)
    shutil.copy2(lxc.HOOK, directory / "usr/share/lxc/hooks/nvidia")  # what verify looks for under the root
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _recorder(node: Path) -> Path:
    records = node / "records"
    records.mkdir()
    records.chmod(0o1777)  # the hook runs as the container's mapped root
    record = records / "cli.args"
    nvidia.recording_cli(node, record)
    return record


def _calls(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


def _name() -> str:
    return f"gal{os.getpid()}{os.urandom(2).hex()}"


def test_lxc_start_runs_the_nvidia_hook_configure_lxc_added_and_revert_takes_it_out(
    node: Path, tmp_path: Path
) -> None:
    record = _recorder(node)
    container = lxc.unprivileged_container(node / LXCPATH.lstrip("/"), _name())
    before = container.config.read_bytes()
    configure = ["configure", "lxc", "--root", str(node), "--container", container.name]
    configured = run_cli(*configure)
    assert configured.exit_code == 0, configured.stderr
    verified = run_cli("configure", "verify", "--root", str(node), "--runtime", "lxc")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    assert f"ok: lxc: container {container.name} has the nvidia hook and its environment" in verified.stdout

    started = lxc.start(container, node / "usr/bin", tmp_path / "lxc.log")
    assert started.returncode == 0 and container.ran(), (tmp_path / "lxc.log").read_text()[-3000:]
    calls = _calls(record)
    assert len(calls) == 1, calls
    assert calls[0].startswith("--user configure --no-cgroups"), calls  # the hook's unprivileged call
    assert "--device=all --compute --utility" in calls[0], calls

    # an admin's line added since stays; exactly our three lines go
    with container.config.open("a") as handle:
        handle.write("lxc.environment = ADMIN=1\n")
    reverted = run_cli("configure", "revert", "--root", str(node), "--runtime", "lxc")
    assert reverted.exit_code == 0, reverted.stderr
    assert container.config.read_bytes() == before + b"lxc.environment = ADMIN=1\n"
    again = lxc.start(container, node / "usr/bin", tmp_path / "lxc2.log")
    assert again.returncode == 0 and container.ran()
    assert len(_calls(record)) == 1  # no hook without our lines: the call above came from them


def test_lxc_refuses_a_privileged_container_and_a_void_device_list_gives_no_gpu(
    node: Path, tmp_path: Path
) -> None:
    record = _recorder(node)
    privileged = lxc.unprivileged_container(node / LXCPATH.lstrip("/"), _name(), privileged=True)
    before = privileged.config.read_bytes()
    refused = run_cli("configure", "lxc", "--root", str(node), "--container", privileged.name)
    assert refused.exit_code == 5 and "is privileged (no lxc.idmap)" in refused.stderr
    assert privileged.config.read_bytes() == before
    # what the refusal saves the admin from: LXC's hook fails a privileged container
    ours = f"lxc.environment = NVIDIA_VISIBLE_DEVICES=all\nlxc.hook.mount = {lxc.HOOK}\n"
    privileged.config.write_text(before.decode() + ours)
    failed = lxc.start(privileged, node / "usr/bin", tmp_path / "privileged.log")
    assert failed.returncode != 0 and not privileged.ran()
    assert "only works in unprivileged mode" in (tmp_path / "privileged.log").read_text()

    container = lxc.unprivileged_container(node / LXCPATH.lstrip("/"), _name())
    configured = run_cli(
        "configure", "lxc", "--root", str(node), "--container", container.name, "--visible-devices", "0"
    )
    assert configured.exit_code == 0, configured.stderr
    assert lxc.start(container, node / "usr/bin", tmp_path / "one.log").returncode == 0
    assert "--device=0 " in _calls(record)[-1]

    text = container.config.read_text().replace("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=void")
    container.config.write_text(text)
    wrong = run_cli("configure", "verify", "--root", str(node), "--runtime", "lxc")
    assert wrong.exit_code == 9 and "NVIDIA_VISIBLE_DEVICES is empty, void or none" in wrong.stdout
    assert lxc.start(container, node / "usr/bin", tmp_path / "void.log").returncode == 0 and container.ran()
    assert len(_calls(record)) == 1  # the hook ran, but gave the container no GPU
