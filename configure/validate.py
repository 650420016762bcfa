"""The node-side checks of command-line values, shared by ``configure`` and ``install`` so both refuse alike.

Each check raises :class:`~plumbing.errors.UsageError` (exit 2) with one sentence naming the option.
:func:`existing_root` also serves as the typer callback of every ``--root`` option.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Union

from plumbing.errors import UsageError

#: the container engines the node side configures, and what ``--runtime`` / ``--cdi`` of install take
ENGINES = ("containerd", "docker", "crio", "podman", "lxc")
#: the engines that run as a service, restarted after a change (podman and LXC read their files per container)
SERVICE_ENGINES = frozenset({"containerd", "docker", "crio"})
RUNTIME_CHOICES = ("auto", *ENGINES, "none")
CDI_CHOICES = ("auto", "on", "off")
#: ``--systemd-cgroup`` of install and configure: follow the default runtime or the kubelet, or set it
SYSTEMD_CGROUP_CHOICES = ("auto", "true", "false")
#: the containerds ``--distro`` takes, in the order detection lists them (:mod:`configure.distros.detection`);
#: here so a command line builds its choices without loading detection at start-up
DISTRO_CHOICES = ("containerd", "k3s", "rke2", "microk8s", "k0s")
#: a runtime name is a TOML key, a JSON key, a CRI handler and a RuntimeClass handler all at once
_RUNTIME_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_runtime_name(name: str) -> str:
    """:raises UsageError: unless ``name`` is letters, digits, '-' or '_'."""
    if not _RUNTIME_NAME.match(name):
        raise UsageError(f"--runtime-name {name!r} must be letters, digits, '-' or '_'")
    return name


def check_runtime_path(path: str) -> str:
    """:raises UsageError: unless ``path`` is absolute, or a bare command name the engine finds on its PATH."""
    if not path or _CONTROL.search(path) or ("/" in path and not path.startswith("/")):
        raise UsageError(
            f"--runtime-path {path!r} must be an absolute path such as /usr/bin/nvidia-container-runtime "
            "(or a bare command name the engine finds on its PATH)"
        )
    return path


def existing_root(root: Union[str, Path]) -> Union[str, Path]:
    """:raises UsageError: when ``--root`` is not an existing directory (nothing is created under it then)."""
    if not Path(root).is_dir():
        raise UsageError(f"the root {root} is not a directory")
    return root
