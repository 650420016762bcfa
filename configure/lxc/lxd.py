"""LXD and Incus: the profile settings that give their containers the GPUs, through their own CLI.

LXD and Incus keep their configuration in their own database, which only their daemon may
change; so we never write a file for them. ``configure lxd|incus`` prints the commands that set
a profile up (``nvidia.runtime=true``: the daemon runs LXC's nvidia hook with
``nvidia-container-cli``; ``nvidia.driver.capabilities``; a ``gpu`` device), and with ``--apply``
runs them with the daemon's client (``lxc`` for LXD, ``incus``), skipping what the profile
already has. ``--undo`` does the reverse. The commands are built here (pure); running them goes
through a runner the caller passes in.
"""

from __future__ import annotations

import shlex
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from plumbing.errors import ToolError, UsageError

#: the daemon -> its command-line client
CLIENTS = {"lxd": "lxc", "incus": "incus"}
RUNTIME_KEY = "nvidia.runtime"
CAPABILITIES_KEY = "nvidia.driver.capabilities"
DEVICE = "gpu"

#: ``runner(argv) -> (exit status, stdout, stderr)``
Runner = Callable[[Sequence[str]], Tuple[int, str, str]]


def setup_commands(
    daemon: str, profile: str, capabilities: str, current: Optional[Dict[str, Any]] = None
) -> List[List[str]]:
    """The client commands that give ``profile`` the GPUs; with ``current`` (``profile show``), only what it lacks."""
    client = _client(daemon)
    config = (current or {}).get("config") or {}
    devices = (current or {}).get("devices") or {}
    commands: List[List[str]] = []
    if str(config.get(RUNTIME_KEY, "")).lower() != "true":
        commands.append([client, "profile", "set", profile, f"{RUNTIME_KEY}=true"])
    if config.get(CAPABILITIES_KEY) != capabilities:
        commands.append([client, "profile", "set", profile, f"{CAPABILITIES_KEY}={capabilities}"])
    if not any(isinstance(d, dict) and d.get("type") == "gpu" for d in devices.values()):
        commands.append([client, "profile", "device", "add", profile, DEVICE, "gpu"])
    return commands


def undo_commands(daemon: str, profile: str, current: Optional[Dict[str, Any]] = None) -> List[List[str]]:
    """The client commands that take the settings out of ``profile`` again (only those it has, with ``current``)."""
    client = _client(daemon)
    if current is None:  # not asked: everything setup_commands adds
        current = {
            "config": {RUNTIME_KEY: "true", CAPABILITIES_KEY: ""},
            "devices": {DEVICE: {"type": "gpu"}},
        }
    config = current.get("config") or {}
    devices = current.get("devices") or {}
    commands = [
        [client, "profile", "unset", profile, key] for key in (RUNTIME_KEY, CAPABILITIES_KEY) if key in config
    ]
    if isinstance(devices.get(DEVICE), dict) and devices[DEVICE].get("type") == "gpu":
        commands.append([client, "profile", "device", "remove", profile, DEVICE])
    return commands


def render(commands: Sequence[Sequence[str]]) -> List[str]:
    """One shell line per command."""
    return [shlex.join(command) for command in commands]


def current_profile(daemon: str, profile: str, runner: Runner) -> Dict[str, Any]:
    """``CLIENT profile show PROFILE``, parsed.

    :raises ToolError: when the client fails (not installed, daemon down, no such profile).
    """
    status, out, err = runner([_client(daemon), "profile", "show", profile])
    if status != 0:
        raise ToolError(
            f"{_client(daemon)} profile show {profile} failed: {(err or out).strip() or f'exit status {status}'}"
        )
    try:
        data = yaml.safe_load(out)
    except yaml.YAMLError as exc:
        raise ToolError(f"{_client(daemon)} profile show {profile} printed no profile: {exc}") from exc
    return data if isinstance(data, dict) else {}


def apply(commands: Sequence[Sequence[str]], runner: Runner) -> List[str]:
    """Run ``commands`` in order; return their shell lines.

    :raises ToolError: naming the first command that fails (the ones before it stay done).
    """
    done: List[str] = []
    for command in commands:
        status, out, err = runner(command)
        if status != 0:
            raise ToolError(
                f"{shlex.join(command)} failed: {(err or out).strip() or f'exit status {status}'}"
            )
        done.append(shlex.join(command))
    return done


def _client(daemon: str) -> str:
    if daemon not in CLIENTS:
        raise UsageError(f"unknown daemon {daemon!r}; choose {' or '.join(CLIENTS)}")
    return CLIENTS[daemon]
