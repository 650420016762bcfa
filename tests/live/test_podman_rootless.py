"""``configure podman --user NAME``: a rootless podman 4.3, run as that user, gets what we wrote in their ~/.config.

The user exists only in the node's ``/etc/passwd``; podman runs as them (``runuser``) in the node's
view of the machine, where the node's ``/etc``, ``/dev``, ``/usr/bin`` and ``/home`` lie over the
host's, so it reads their ``~/.config/containers/containers.conf`` and the node's ``/etc/cdi`` at
the real paths. Without subordinate ids podman maps the user alone (a warning), which is all a
busybox container needs. The pause process rootless podman leaves behind is stopped by its PID.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.live import nvidia
from tests.live.daemons import short_dir
from tests.live.image import LocalImage
from tests.live.nodes import char_devices
from tests.live.nodeview import DEFAULT_LAYERS, node_view_argv

pytestmark = pytest.mark.slow

UID = 4321
USER = "gal-rootless"
LAYERS = (*DEFAULT_LAYERS, "/home", "/usr/share/containers")


@pytest.fixture
def node() -> Iterator[Path]:
    """A node with one stand-in GPU and an account whose home the user owns (traversable by it)."""
    directory = short_dir("rootless")
    directory.chmod(0o755)
    (directory / "etc").mkdir()
    for name, line in (
        ("passwd", f"{USER}:x:{UID}:{UID}::/home/{USER}:/bin/sh\n"),
        ("group", f"{USER}:x:{UID}:\n"),
    ):
        (directory / "etc" / name).write_text(Path(f"/etc/{name}").read_text() + line)
    (directory / "etc/containers").mkdir()
    shutil.copy("/etc/containers/policy.json", directory / "etc/containers/policy.json")
    home = directory / "home" / USER
    home.mkdir(parents=True)
    os.chown(home, UID, UID)
    nvidia.make_gpu_nodes(directory)
    for name, _major, _minor in nvidia.GPU_NODES:
        (directory / "dev" / name).chmod(0o666)  # as the driver makes them (mknod's mode is cut by the umask)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def as_user(node: Path, image: LocalImage, *podman_run: str) -> subprocess.CompletedProcess[str]:
    """Load the image and ``podman run PODMAN_RUN`` as the user in the node's view; stop podman's pause process."""
    shutil.copy(image.archive, node / "image.tar")
    os.chmod(node / "image.tar", 0o644)
    run = [
        "runuser",
        "-u",
        USER,
        "--",
        "env",
        f"HOME=/home/{USER}",
        f"XDG_RUNTIME_DIR=/run/user/{UID}",
        "podman",
    ]
    script = "\n".join(
        [
            f"mkdir -p /run/user/{UID} && chown {UID}:{UID} /run/user/{UID}",
            shlex.join([*run, "load", "-q", "-i", str(node / "image.tar")]) + " >/dev/null",
            shlex.join(
                [
                    *run,
                    "run",
                    "--rm",
                    "--network",
                    "none",
                    "--pull",
                    "never",
                    "--cgroup-manager",
                    "cgroupfs",
                    *podman_run,
                ]
            ),
            "status=$?",
            f"pause=/run/user/{UID}/libpod/tmp/pause.pid",
            '[ -f "$pause" ] && kill -9 "$(cat "$pause")"',
            "exit $status",
        ]
    )
    scratch = short_dir("rootless-view")
    try:
        argv = node_view_argv(node, scratch, ["sh", "-c", script], LAYERS)
        return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    finally:
        _wait_for_no_process_of(UID)
        shutil.rmtree(scratch, ignore_errors=True)


def _wait_for_no_process_of(uid: int, timeout: float = 10) -> None:
    """The pause process killed above (and its conmon) are reaped by their parents shortly after."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid]:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes of uid {uid} are still running after the test")


def _owner(proc: Path) -> int:
    try:
        return proc.stat().st_uid
    except OSError:
        return -1


def test_rootless_podman_sees_the_gpu_through_the_system_cdi_spec(node: Path, image: LocalImage) -> None:
    configured = run_cli("configure", "podman", "--user", USER, "--root", str(node))
    assert configured.exit_code == 0, configured.stderr
    assert not (node / "home" / USER / ".config").exists()  # CDI: nothing of the user's is written
    verified = run_cli("configure", "verify", "--root", str(node), "--runtime", "podman")
    assert verified.exit_code == 0 and f"ok: podman: {USER} can use them" in verified.stdout, verified.stdout

    ran = as_user(
        node, image, "--device", "nvidia.com/gpu=all", image.ref, "/bin/sh", "-c", "ls -l /dev/nvidia*"
    )
    assert ran.returncode == 0, ran.stderr
    assert char_devices(ran.stdout) == {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255)}, ran.stdout

    # a node the user may not open: verify says so first, and the container cannot have it
    (node / "dev/nvidia0").chmod(0o600)
    wrong = run_cli("configure", "verify", "--root", str(node), "--runtime", "podman")
    assert wrong.exit_code == 9 and f"/dev/nvidia0 (mode 600) cannot be opened by {USER}" in wrong.stdout


def test_rootless_podman_runs_nvidias_hook_from_the_users_hooks_dir_with_no_cgroups(
    node: Path, image: LocalImage, toolkit: Path
) -> None:
    nvidia.install_binaries(node, toolkit, (nvidia.HOOK,))
    records = node / "records"
    records.mkdir()
    records.chmod(0o1777)  # the hook runs as the user
    record = records / "cli.args"
    nvidia.recording_cli(node, record)
    configured = run_cli("configure", "podman", "--hook", "--user", USER, "--root", str(node))
    assert configured.exit_code == 0, configured.stderr
    assert run_cli("configure", "verify", "--root", str(node), "--runtime", "podman").exit_code == 0

    ran = as_user(node, image, "-e", "NVIDIA_VISIBLE_DEVICES=all", image.ref, "/bin/true")
    assert ran.returncode == 0, ran.stderr
    calls = record.read_text().splitlines() if record.exists() else []
    assert len(calls) == 1 and "configure" in calls[0] and "--device=all" in calls[0], calls
    assert "--no-cgroups" in calls[0], calls  # the user's toolkit config, read through the hook's -config

    # reverted, the user's podman no longer reads a hook: the container runs, the hook does not
    assert run_cli("configure", "revert", "--root", str(node), "--runtime", "podman").exit_code == 0
    assert as_user(node, image, "-e", "NVIDIA_VISIBLE_DEVICES=all", image.ref, "/bin/true").returncode == 0
    assert len(record.read_text().splitlines()) == 1
