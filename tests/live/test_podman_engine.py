"""``configure podman``: podman 4.3 runs containers with the GPUs through what we wrote, CDI first, then the hook.

The node has stand-in GPU device nodes (``/dev/nvidia0`` 195:0, ``/dev/nvidiactl`` 195:255). podman
runs in the node's view of the machine (:class:`~tests.live.daemons.PodmanView`), so it reads the
node's ``/etc/cdi`` and ``/etc/containers/oci/hooks.d`` at their real paths with no flag pointing
at them: what reaches the container came from where podman itself looks. A wrong configuration
(a spec of another kind, a hook in a directory podman does not read) must fail the container or
leave the hook uncalled, and ``verify`` must say so first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cli_runner import run_cli
from tests.live import nvidia
from tests.live.daemons import PodmanView
from tests.live.image import LocalImage
from tests.live.nodes import char_devices
from tests.live.nodeview import wrapper_on_path

pytestmark = pytest.mark.slow

LIST_DEVICES = ["/bin/sh", "-c", "ls -l /dev/nvidia* 2>&1; true"]
SPEC = "etc/cdi/nvidia.yaml"
HOOK = "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def podman_node(node: Path) -> Path:
    """A node with one stand-in GPU and the host's containers policy (podman reads it from the node's /etc)."""
    nvidia.make_gpu_nodes(node)
    (node / "etc/containers").mkdir(parents=True, exist_ok=True)
    shutil.copy("/etc/containers/policy.json", node / "etc/containers/policy.json")
    return node


def run_args(view: PodmanView, image: LocalImage, *extra: str) -> list[str]:
    return [
        "run",
        "--rm",
        "--network",
        "none",
        "--pull",
        "never",
        "--cgroup-parent",
        f"/{view.cgroup_parent}",
        *extra,
        image.ref,
        *LIST_DEVICES,
    ]


def test_podman_sees_the_gpu_through_the_cdi_spec_configure_podman_wrote(
    tmp_path: Path, image: LocalImage, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = podman_node(tmp_path / "node")
    configured = run_cli("configure", "podman", "--root", str(node))
    assert configured.exit_code == 0, configured.stderr
    assert f"wrote {node / SPEC}" in configured.stdout
    verified = run_cli("configure", "verify", "--root", str(node), "--runtime", "podman")
    assert verified.exit_code == 0, verified.stdout
    assert "ok: podman: CDI devices nvidia.com/gpu=... come from /etc/cdi/nvidia.yaml" in verified.stdout

    with PodmanView(node) as view:
        assert view.run("load", "-i", str(image.archive)).returncode == 0
        asked = view.run(*run_args(view, image, "--device", "nvidia.com/gpu=all"))
        assert asked.returncode == 0, asked.stderr
        assert char_devices(asked.stdout) == {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255)}, (
            asked.stdout
        )
        plain = view.run(*run_args(view, image))
        assert char_devices(plain.stdout) == {}, plain.stdout

        # the admin's check runs `podman` by name; here that name enters the view
        with wrapper_on_path(tmp_path / "bin", "podman", view.argv()) as bin_dir:
            monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
            for key in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF"):
                monkeypatch.setenv(key, view.env[key])
            verify = [
                "configure",
                "verify",
                "--root",
                str(node),
                "--runtime",
                "podman",
                "--live",
                "--image",
                image.ref,
            ]
            live = run_cli(*verify)
            assert live.exit_code == 0, live.stdout + live.stderr
            assert "with the CDI device nvidia.com/gpu=all" in live.stdout
            absent = run_cli(*verify, "--visible-devices", "nvidia.com/gpu=7")
            assert absent.exit_code == 9, absent.stdout

        # a wrong spec: verify names it, and it is what podman refuses
        spec = node / SPEC
        good = spec.read_text()
        spec.write_text(yaml.safe_dump(dict(yaml.safe_load(good), kind="example.com/gpu"), sort_keys=False))
        wrong = run_cli("configure", "verify", "--root", str(node), "--runtime", "podman")
        assert (
            wrong.exit_code == 9 and "PROBLEM: podman: no usable nvidia.com/gpu CDI spec" in wrong.stdout
        ), wrong.stdout
        refused = view.run(*run_args(view, image, "--device", "nvidia.com/gpu=all"))
        assert refused.returncode != 0 and "nvidia.com/gpu=all" in refused.stderr, refused.stderr
        spec.write_text(good)

    reverted = run_cli("configure", "revert", "--root", str(node), "--runtime", "podman")
    assert reverted.exit_code == 0, reverted.stderr
    assert not spec.exists()


def test_podman_uses_the_spec_nvidia_cdi_refresh_keeps_in_var_run_cdi(
    tmp_path: Path, image: LocalImage
) -> None:
    node = podman_node(tmp_path / "node")
    refresh = node / "var/run/cdi/nvidia.yaml"
    made = run_cli("configure", "cdi", "--root", str(node), "--output", "/var/run/cdi/nvidia.yaml")
    assert made.exit_code == 0, made.stderr
    configured = run_cli("configure", "podman", "--root", str(node), "--json")
    assert configured.exit_code == 0, configured.stderr
    assert '"changed": []' in configured.stdout and not (node / SPEC).exists()
    assert '"cdi_spec": "/var/run/cdi/nvidia.yaml"' in configured.stdout

    with PodmanView(node) as view:
        # the view's /run is its own tmpfs: put the refreshed spec where podman looks, as the service would
        assert view.holder is not None
        copy = [
            "nsenter",
            f"--mount=/proc/{view.holder.pid}/ns/mnt",
            "--",
            "sh",
            "-c",
            f"mkdir -p /run/cdi && cp {refresh} /run/cdi/nvidia.yaml",
        ]
        assert subprocess.run(copy, check=False).returncode == 0
        assert view.run("load", "-i", str(image.archive)).returncode == 0
        asked = view.run(*run_args(view, image, "--device", "nvidia.com/gpu=0"))
        assert asked.returncode == 0, asked.stderr
        assert "/dev/nvidia0" in char_devices(asked.stdout), asked.stdout


def test_podman_runs_nvidias_hook_from_the_hooks_dir_it_reads_and_not_from_another(
    tmp_path: Path, image: LocalImage, toolkit: Path
) -> None:
    node = podman_node(tmp_path / "node")
    nvidia.install_binaries(node, toolkit, (nvidia.HOOK,))
    record = tmp_path / "cli.args"
    nvidia.recording_cli(node, record)
    configured = run_cli("configure", "podman", "--hook", "--root", str(node))
    assert configured.exit_code == 0, configured.stderr
    assert (node / HOOK).is_file()
    assert run_cli("configure", "verify", "--root", str(node), "--runtime", "podman").exit_code == 0

    with PodmanView(node, layers=("/usr/share/containers",)) as view:
        assert view.run("load", "-i", str(image.archive)).returncode == 0
        ran = view.run(*run_args(view, image, "-e", "NVIDIA_VISIBLE_DEVICES=all"))
        assert ran.returncode == 0, ran.stderr
        calls = record.read_text().splitlines()
        assert len(calls) == 1 and "configure" in calls[0] and "--device=all" in calls[0], calls

        # the wrong place (podman(1) names it, podman 4.3 does not read it): never called, and verify says so
        assert run_cli("configure", "revert", "--root", str(node), "--runtime", "podman").exit_code == 0
        assert not (node / HOOK).exists()
        wrong_dir = "/etc/containers/oci/hooks.d"
        elsewhere = run_cli("configure", "podman", "--hook", "--hooks-dir", wrong_dir, "--root", str(node))
        assert elsewhere.exit_code == 0 and "is read only with --hooks-dir" in elsewhere.stderr
        wrong = run_cli("configure", "verify", "--root", str(node), "--runtime", "podman")
        assert wrong.exit_code == 9 and f"{wrong_dir} is not a hooks directory podman reads" in wrong.stdout
        assert view.run(*run_args(view, image, "-e", "NVIDIA_VISIBLE_DEVICES=all")).returncode == 0
        assert len(record.read_text().splitlines()) == 1


def test_a_podman_view_that_stops_spares_the_container_another_view_runs_in_the_shared_libpod_parent(
    tmp_path: Path, image: LocalImage
) -> None:
    # the live check starts its container with no --cgroup-parent, so it lands in libpod_parent,
    # which every worker shares; CI once saw it killed there by the other worker's view stopping
    other = PodmanView(podman_node(tmp_path / "other"))
    try:
        with PodmanView(podman_node(tmp_path / "node")):
            other.start()
            assert other.run("load", "-i", str(image.archive)).returncode == 0
            started = other.run("run", "-d", "--network", "none", "--pull", "never", image.ref, "sleep", "60")
            assert started.returncode == 0, started.stderr
            container = started.stdout.split()[-1]
            pid = other.run("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
            assert "/libpod_parent/" in Path(f"/proc/{pid}/cgroup").read_text()
        # ask the kernel: podman's own state still says "running" when the cleanup took its conmon too
        assert _alive(int(pid)), "the first view's cleanup killed the other view's container"
    finally:
        other.stop()


def _alive(pid: int) -> bool:
    """The process runs (a killed one nobody reaped yet is a zombie, still in /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")
