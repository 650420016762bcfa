"""OCI hook: podman reads the hook file ``configure crio --hook`` writes and runs NVIDIA's real hook.

podman refuses a hooks directory with a malformed hook, so a container that starts with
``--hooks-dir`` pointing where gpu-airgap wrote the file proves the file is right; the hook itself
(NVIDIA's ``nvidia-container-runtime-hook`` 1.20.0) then calls ``nvidia-container-cli configure``
for the container, which a stand-in records (the real CLI needs a driver).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.live import nvidia
from tests.live.daemons import PodmanView
from tests.live.image import LocalImage
from tests.live.nodeview import wrapper_on_path

pytestmark = pytest.mark.slow

HOOK_FILE = "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def test_podman_runs_the_hook_configure_crio_wrote_and_refuses_a_malformed_one(
    tmp_path: Path, image: LocalImage, toolkit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = tmp_path / "node"
    nvidia.install_binaries(node, toolkit, (nvidia.HOOK,))
    record = tmp_path / "cli.args"
    nvidia.recording_cli(node, record)
    configured = run_cli("configure", "crio", "--hook", "--root", str(node))
    assert configured.exit_code == 0, configured.stderr
    verified = run_cli("configure", "verify", "--root", str(node), "--runtime", "crio")
    assert verified.exit_code == 0, verified.stdout
    hooks_dir = (node / HOOK_FILE).parent

    with PodmanView(node) as view:
        loaded = view.run("load", "-i", str(image.archive))
        assert loaded.returncode == 0, loaded.stderr
        run_args = [
            "run",
            "--rm",
            "--network",
            "none",
            "--pull",
            "never",
            "--cgroup-parent",
            f"/{view.cgroup_parent}",
            "-e",
            "NVIDIA_VISIBLE_DEVICES=all",
            image.ref,
            "/bin/sh",
            "-c",
            "echo ran",
        ]
        ran = view.run("--hooks-dir", str(hooks_dir), *run_args)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == "ran\n"
        calls = record.read_text().splitlines()
        assert len(calls) == 1 and calls[0].startswith("--load-kmods configure"), calls
        assert "--device=all" in calls[0] and "--pid=" in calls[0]

        # without the hooks dir the hook never runs: the call above came from the file we wrote
        assert view.run("--hooks-dir", str(tmp_path / "no-hooks"), *run_args).returncode == 0
        assert len(record.read_text().splitlines()) == 1

        # the node admin's check: verify --live runs `podman` by name; here that name enters the view
        with wrapper_on_path(tmp_path / "bin", "podman", view.argv()) as bin_dir:
            monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
            for key in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF"):
                monkeypatch.setenv(key, view.env[key])
            live = run_cli(
                "configure",
                "verify",
                "--root",
                str(node),
                "--runtime",
                "crio",
                "--live",
                "--image",
                image.ref,
                "--visible-devices",
                "all",
            )
        assert live.exit_code == 0, live.stdout + live.stderr
        assert f"ok: crio: live: a container of {image.ref} started with the OCI hook" in live.stdout
        assert len(record.read_text().splitlines()) == 2  # the hook ran for the check's container too
        assert view.run("ps", "-aq").stdout == ""  # and the check removed it

        hook = node / HOOK_FILE
        data = json.loads(hook.read_text())
        del data["stages"]
        hook.write_text(json.dumps(data))
        broken = run_cli(
            "configure", "verify", "--root", str(node), "--runtime", "crio", "--live", "--image", image.ref
        )
        assert broken.exit_code == 9 and "stages must list" in broken.stdout
        assert "live:" not in broken.stdout  # caught before any container is tried
        refused = view.run("--hooks-dir", str(hooks_dir), *run_args)
        assert refused.returncode != 0 and "missing required property: stages" in refused.stderr
        assert len(record.read_text().splitlines()) == 2
