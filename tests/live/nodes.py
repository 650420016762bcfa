"""Scratch node roots for the live tests, with this machine's site settings, and a daemon on each.

A node admin's own settings come first (they are in config.toml before gpu-airgap runs): a local
sandbox image (no registry here), ``restrict_oom_score_adj`` (runc cannot write a negative
oom_score_adj without CAP_SYS_RESOURCE) and cgroupfs (no systemd as PID 1). Root, state and socket
are containerd flags (:class:`tests.live.daemons.Containerd`), so the file keeps its own paths.
Then gpu-airgap edits the file, and containerd reads exactly what it wrote.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from tests.containerd_helpers import CONFIG, FIXTURES
from tests.live import nvidia
from tests.live.daemons import Containerd
from tests.live.image import LocalImage

SEED_SANDBOX = 'sandbox_image = "registry.k8s.io/pause:3.9"'
#: what a node's minimal containerd config looks like before install (runc default, no runtimes table)
MINIMAL = """version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
"""


def site_config(text: str, sandbox_image: str) -> str:
    """The seed's ``config.toml.base`` with this machine's site settings."""
    assert SEED_SANDBOX in text, "the seed config changed: update tests.live.nodes.site_config"
    text = text.replace(SEED_SANDBOX, f'sandbox_image = "{sandbox_image}"\n    restrict_oom_score_adj = true')
    return text.replace("SystemdCgroup = true", "SystemdCgroup = false")


def seed_node(node: Path, image: LocalImage) -> Path:
    """ROOT/etc/containerd/config.toml = the seed's config.toml.base with the site's settings."""
    config = node / CONFIG
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(site_config((FIXTURES / "config.toml.base").read_text(), image.ref))
    return config


def minimal_node_config(node: Path, image: LocalImage) -> Path:
    """ROOT/etc/containerd/config.toml = :data:`MINIMAL` (a node before ``gpu-airgap install``)."""
    config = node / CONFIG
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(MINIMAL.format(image=image.ref))
    return config


def start_containerd(node: Path, image: LocalImage, runtime_log: Optional[Path] = None) -> Containerd:
    """containerd on the node's config with the image imported.

    With ``runtime_log``, NVIDIA's runtime reads a debug config from ``$XDG_CONFIG_HOME`` and logs
    there; without it, it reads the node's own ``/etc/nvidia-container-runtime/config.toml``.
    """
    env = {}
    if runtime_log is not None:
        env["XDG_CONFIG_HOME"] = str(nvidia.debug_config(runtime_log.parent / "xdg", runtime_log))
    daemon = Containerd(node, env=env)
    daemon.start()
    try:
        daemon.import_image(image.archive)
    except Exception:
        daemon.stop()
        raise
    return daemon


_LS_DEVICE = re.compile(r"^c\S+\s+\d+\s+\S+\s+\S+\s+(\d+),\s+(\d+)\s.*\s(/dev/\S+)$")


def char_devices(ls_output: str) -> dict[str, tuple[int, int]]:
    """``{path: (major, minor)}`` of the character devices in ``ls -l`` output."""
    found = {}
    for line in ls_output.splitlines():
        match = _LS_DEVICE.match(line.strip())
        if match:
            found[match.group(3)] = (int(match.group(1)), int(match.group(2)))
    return found
