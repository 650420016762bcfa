"""Nodes whose NVIDIA runtime the GPU Operator manages: tell, and refuse to fight it.

The GPU Operator's toolkit container (ClusterPolicy ``toolkit.enabled=true``) installs the runtime under ``/usr/local/nvidia/toolkit`` and
registers ``nvidia``, ``nvidia-cdi``, ``nvidia-experimental`` and ``nvidia-legacy`` with their
binaries there, in ``/etc/containerd/config.toml`` or (gpu-operator >= 25.10) the drop-in
``/etc/containerd/conf.d/99-nvidia.toml``; on k3s/RKE2 the agent finds the toolkit's binary itself
(``tests/data/fixtures/distros/gpu-operator``). Rewriting that configuration starts a tug of war with
the operator, which rewrites it back on its next reconcile. So ``configure`` and ``install`` refuse
unless ``--force`` (:func:`refuse_if_managed`), and ``status`` names the owner (:func:`owner`).

Ownership is the registration, not the directory. With ``toolkit.enabled=false`` (drivers or the
device plugin from the Operator, the toolkit from the host's packages: a setup NVIDIA supports) the
toolkit container's cleanup removes the runtimes it registered but may leave
``/usr/local/nvidia/toolkit`` behind (``tests/data/fixtures/distros/gpu-operator-toolkit-disabled``);
nothing then runs from there, so that node is ours to configure. The signs are a runtime of the
containerd config chain whose ``BinaryName`` is under the toolkit directory, or the Operator's
drop-in (:data:`OPERATOR_DROP_INS`) holding one even before the main config imports it.

Pure over a root: reads files only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from configure import tomledit
from configure.changes import read_optional
from configure.containerd.imports import ConfigFile, load_chain
from configure.distros.detection import Distro
from plumbing.errors import ConfigFormatError, ManagedByOperator
from plumbing.fsutil import rooted

TOOLKIT_DIR = "/usr/local/nvidia/toolkit"
OWNER = "the NVIDIA GPU Operator"
#: the drop-ins the Operator's toolkit writes (gpu-operator >= 25.10; toolkit 1.18.0 used config.d)
OPERATOR_DROP_INS = ("/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/config.d/99-nvidia.toml")


def _runtimes(data: Dict[str, Any]) -> Dict[str, Any]:
    """Every containerd runtime table in one parsed file, whatever the config version."""
    found: Dict[str, Any] = {}
    plugins = data.get("plugins")
    for plugin in (plugins or {}).values() if isinstance(plugins, dict) else ():
        containerd = plugin.get("containerd") if isinstance(plugin, dict) else None
        runtimes = containerd.get("runtimes") if isinstance(containerd, dict) else None
        if isinstance(runtimes, dict):
            found.update({k: v for k, v in runtimes.items() if isinstance(v, dict)})
    return found


def evidence(root: Path, distro: Distro) -> List[str]:
    """What shows the GPU Operator's toolkit owns the runtime here (a registration); empty when nothing does."""
    signs: List[str] = []
    seen: List[str] = []
    for config in _configs(root, distro):
        seen.append(config.path)
        signs.extend(_registrations(config.path, config.data))
    for drop_in in OPERATOR_DROP_INS:
        if drop_in in seen:
            continue
        path = rooted(root, drop_in)
        raw = read_optional(path) if path.is_file() else None
        try:
            data = tomledit.parse(path, raw).unwrap() if raw is not None else {}
        except ConfigFormatError:
            continue
        signs.extend(_registrations(drop_in, data))
    return signs


def leftover_note(root: Path) -> Optional[str]:
    """A sentence when the Operator's toolkit directory is here but nothing registers it; else None."""
    if not rooted(root, TOOLKIT_DIR).is_dir():
        return None
    return (
        f"{TOOLKIT_DIR} is left from the GPU Operator's toolkit, but no runtime is registered from it "
        "(toolkit.enabled=false): the host's toolkit is configured"
    )


def _configs(root: Path, distro: Distro) -> List[ConfigFile]:
    path = rooted(root, distro.config)
    raw = read_optional(path)
    if raw is None:
        return []
    try:
        return list(load_chain(root, distro.config, tomledit.parse(path, raw).unwrap()))
    except ConfigFormatError:
        return []  # the engine itself says what is wrong with the file


def _registrations(where: str, data: Dict[str, Any]) -> List[str]:
    signs = []
    for name, table in sorted(_runtimes(data).items()):
        options = table.get("options")
        binary = options.get("BinaryName", "") if isinstance(options, dict) else ""
        if isinstance(binary, str) and binary.startswith(TOOLKIT_DIR + "/"):
            signs.append(f"{where} registers runtime {name} with {binary}")
    return signs


def owner(root: Path, distro: Distro) -> Optional[str]:
    """Who manages the NVIDIA runtime's registration on this node: the GPU Operator, or None."""
    return OWNER if evidence(root, distro) else None


def refuse_if_managed(root: Path, distro: Distro, force: bool) -> List[str]:
    """Refuse (unless ``force``) when the GPU Operator manages the runtime; return the warnings to print.

    :raises ManagedByOperator: one sentence naming the owner, the evidence and ``--force``.
    """
    signs = evidence(root, distro)
    if not signs:
        note = leftover_note(root)
        return [note] if note else []
    if not force:
        raise ManagedByOperator(OWNER, signs[0])
    return [f"taking the runtime configuration over from {OWNER} (--force): {signs[0]}"]
