"""Docker: dockerd reads the daemon.json ``configure docker`` wrote, lists the runtime and runs through it.

The node's daemon.json is the seed's (``fixtures/docker/daemon.json``) plus this machine's site
settings (private data-root, exec-root, pidfile and socket; no iptables or bridge; cgroupfs, no
oom-score-adjust). dockerd reads the file at its real path in a node view, so it reads exactly what
gpu-airgap wrote; NVIDIA's runtime logs every container it creates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.live import nvidia
from tests.live.daemons import Dockerd
from tests.live.image import PAUSE_COMMAND, LocalImage

pytestmark = pytest.mark.slow

SEED = Path(__file__).parents[1] / "data" / "fixtures" / "docker" / "daemon.json"
DAEMON_JSON = "etc/docker/daemon.json"


def runtimes(daemon: Dockerd) -> dict[str, object]:
    """``docker info``'s runtimes, as dockerd has them loaded now."""
    info = daemon.docker("info", "--format", "{{json .Runtimes}}")
    assert info.returncode == 0, info.stderr
    return dict(json.loads(info.stdout))


def test_dockerd_runs_the_runtime_configure_docker_wrote_and_every_other_key_survives(
    tmp_path: Path, image: LocalImage, toolkit: Path
) -> None:
    node = tmp_path / "node"
    nvidia.install_binaries(node, toolkit)
    log = tmp_path / "runtime.log"
    daemon = Dockerd(node, env={"XDG_CONFIG_HOME": str(nvidia.debug_config(tmp_path / "xdg", log))})
    seed = json.loads(SEED.read_text())
    site = daemon.site_settings()
    before = dict(seed, **site)
    config = node / DAEMON_JSON
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(before, indent=2) + "\n")

    daemon.start()
    try:
        change = "CMD " + json.dumps(PAUSE_COMMAND)
        imported = daemon.docker("import", "--change", change, str(image.rootfs_tar), image.ref)
        assert imported.returncode == 0, imported.stderr
        # before gpu-airgap: dockerd has no such runtime, so the run below can fail
        refused = daemon.docker("run", "--rm", "--runtime", "nvidia", image.ref, "/bin/true")
        assert refused.returncode != 0 and "Unknown runtime specified nvidia" in refused.stderr

        configured = run_cli("configure", "docker", "--root", str(node))
        assert configured.exit_code == 0, configured.stderr
        written = json.loads(config.read_text())
        assert written.pop("runtimes") == {
            "nvidia": {"path": "/usr/bin/nvidia-container-runtime", "args": []}
        }
        assert written == before and list(written) == list(before)  # every other key, value and order
        assert all(written[key] == value for key, value in seed.items() if key not in site)
        assert run_cli("configure", "verify", "--root", str(node), "--runtime", "docker").exit_code == 0

        # configured but not loaded: the static checks pass, the live check says what is wrong
        verify = [
            "configure",
            "verify",
            "--root",
            str(node),
            "--runtime",
            "docker",
            "--live",
            "--address",
            str(daemon.socket),
            "--image",
            image.ref,
        ]
        stale = run_cli(*verify)
        assert stale.exit_code == 9
        assert "PROBLEM: docker: live: dockerd has not loaded the runtime nvidia" in stale.stdout

        daemon.reload()  # kill -HUP: dockerd re-reads daemon.json and loads the new runtime
        assert _eventually(lambda: "nvidia" in runtimes(daemon)), daemon.log_tail()
        assert runtimes(daemon)["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime"}
        run = daemon.docker(
            "run", "--rm", "--runtime", "nvidia", "--network", "none", image.ref, "/bin/sh", "-c", "echo ran"
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == "ran\n"
        assert len(nvidia.handled_bundles(log)) == 1, "the container did not go through NVIDIA's runtime"
        plain = daemon.docker("run", "--rm", "--network", "none", image.ref, "/bin/true")
        assert plain.returncode == 0 and len(nvidia.handled_bundles(log)) == 1  # runc, the default, did not

        checked = run_cli(*verify)
        assert checked.exit_code == 0, checked.stdout + checked.stderr
        assert f"ok: docker: live: a container of {image.ref} started with --runtime nvidia" in checked.stdout
        assert len(nvidia.handled_bundles(log)) == 2
        assert daemon.docker("ps", "-aq").stdout == ""  # removed again
    finally:
        daemon.stop()


def _eventually(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False
