"""NVIDIA's real toolkit binaries for the live tests, stand-in GPU device nodes, and the runtime's debug log.

The binaries come from NVIDIA's own 1.20.0 packages built from source (``tests/data/nvidia-from-source``,
checked against its SHA256SUMS by :func:`tests.upstream.prebuilt.checked_build`):
``nvidia-container-runtime``, ``nvidia-ctk``, ``nvidia-cdi-hook`` from nvidia-container-toolkit-base and
``nvidia-container-runtime-hook`` from nvidia-container-toolkit, extracted with ``dpkg-deb -x``.
``nvidia-container-cli`` (libnvidia-container-tools) is not built there; :func:`recording_cli` is a
stand-in that records how the hook called it.

Without a GPU, the runtime still does everything the tests check: it forwards to runc, logs each
command it handles (``debug`` in its config), and in ``cdi`` mode adds the device nodes of a CDI
spec to the OCI spec on ``create``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.upstream.prebuilt import checked_build

BASE_DEB = "deb/amd64/nvidia-container-toolkit-base_1.20.0-1_amd64.deb"
TOOLKIT_DEB = "deb/amd64/nvidia-container-toolkit_1.20.0-1_amd64.deb"
RUNTIME = "nvidia-container-runtime"
HOOK = "nvidia-container-runtime-hook"
#: (name, major, minor) of the device nodes a node with one GPU has
GPU_NODES = (("nvidia0", 195, 0), ("nvidiactl", 195, 255))


def extract_toolkit(dest: Path) -> Path:
    """Unpack both packages (checked first) into ``dest``; return the binaries' directory (``usr/bin``).

    :raises FileNotFoundError: the packages are missing or changed (a broken checkout fails, never skips).
    """
    build = checked_build().root
    for deb in (BASE_DEB, TOOLKIT_DEB):
        subprocess.run(["dpkg-deb", "-x", str(build / deb), str(dest)], check=True, capture_output=True)
    return dest / "usr/bin"


def install_binaries(node: Path, binaries: Path, names: tuple[str, ...] = (RUNTIME,)) -> None:
    """Copy NVIDIA's ``names`` into ``node/usr/bin`` (replacing a stand-in a package put there)."""
    target = node / "usr/bin"
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        (target / name).unlink(missing_ok=True)
        shutil.copy2(binaries / name, target / name)


def make_gpu_nodes(node: Path) -> None:
    """Stand-in character devices ``/dev/nvidia0`` (195, 0) and ``/dev/nvidiactl`` (195, 255) under ``node``."""
    dev = node / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for name, major, minor in GPU_NODES:
        path = dev / name
        path.unlink(missing_ok=True)
        os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))  # S_IFCHR


def debug_config(config_home: Path, log: Path, extra: str = "") -> Path:
    """A runtime config under ``$XDG_CONFIG_HOME`` that logs every call to ``log``; returns the config home.

    The runtime reads ``$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml`` instead of
    ``/etc/nvidia-container-runtime/config.toml`` when the variable is set.
    """
    config = config_home / "nvidia-container-runtime" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[nvidia-container-runtime]\ndebug = "{log}"\nlog-level = "debug"\n{extra}')
    return config_home


def handled_bundles(log: Path) -> list[str]:
    """The OCI bundle directories the runtime was called for on ``create`` (from its debug log)."""
    if not log.exists():
        return []
    bundles: list[str] = []
    bundle = ""
    for line in log.read_text().splitlines():
        if "Using bundle directory: " in line:
            bundle = line.split("Using bundle directory: ", 1)[1].split('"', 1)[0]
        elif "Create command detected" in line and bundle:
            bundles.append(bundle)
    return bundles


def recording_cli(node: Path, record: Path) -> None:
    """A stand-in ``nvidia-container-cli`` in ``node/usr/bin`` that appends its arguments to ``record``."""
    cli = node / "usr/bin/nvidia-container-cli"
    cli.parent.mkdir(parents=True, exist_ok=True)
    cli.unlink(missing_ok=True)
    cli.write_text(f'#!/bin/sh\necho "$@" >> {record}\nexit 0\n')
    cli.chmod(0o755)
