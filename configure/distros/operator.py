"""Nodes whose NVIDIA runtime the GPU Operator manages: tell, and refuse to fight it.

The GPU Operator's toolkit container installs the runtime under ``/usr/local/nvidia/toolkit`` and
registers ``nvidia``, ``nvidia-cdi``, ``nvidia-experimental`` and ``nvidia-legacy`` with their
binaries there, in ``/etc/containerd/config.toml`` or (gpu-operator >= 25.10) the drop-in
``/etc/containerd/conf.d/99-nvidia.toml``; on k3s/RKE2 the agent finds the toolkit's binary itself
(``tests/data/fixtures/distros/gpu-operator``). Rewriting that configuration starts a tug of war with
the operator, which rewrites it back on its next reconcile. So ``configure`` and ``install`` refuse
unless ``--force`` (:func:`refuse_if_managed`), and ``status`` names the owner (:func:`owner`).

Pure over a root: reads files only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from configure import tomledit
from configure.changes import read_optional
from configure.containerd.imports import load_chain
from configure.distros.detection import Distro
from plumbing.errors import ConfigFormatError, ManagedByOperator
from plumbing.fsutil import rooted

TOOLKIT_DIR = "/usr/local/nvidia/toolkit"
OWNER = "the NVIDIA GPU Operator"


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
    """What shows the GPU Operator manages the runtime here; empty when nothing does."""
    signs: List[str] = []
    if rooted(root, TOOLKIT_DIR).is_dir():
        signs.append(f"its toolkit directory {TOOLKIT_DIR} exists")
    path = rooted(root, distro.config)
    raw = read_optional(path)
    if raw is None:
        return signs
    try:
        chain = load_chain(root, distro.config, tomledit.parse(path, raw).unwrap())
    except ConfigFormatError:
        return signs  # the engine itself says what is wrong with the file
    for config in chain:
        for name, table in sorted(_runtimes(config.data).items()):
            options = table.get("options")
            binary = options.get("BinaryName", "") if isinstance(options, dict) else ""
            if isinstance(binary, str) and binary.startswith(TOOLKIT_DIR + "/"):
                signs.append(f"{config.path} registers runtime {name} with {binary}")
    return signs


def owner(root: Path, distro: Distro) -> Optional[str]:
    """Who manages the NVIDIA runtime's registration on this node: the GPU Operator, or None."""
    return OWNER if evidence(root, distro) else None


def refuse_if_managed(root: Path, distro: Distro, force: bool) -> List[str]:
    """Refuse (unless ``force``) when the GPU Operator manages the runtime; return warnings for ``force``.

    :raises ManagedByOperator: one sentence naming the owner, the evidence and ``--force``.
    """
    signs = evidence(root, distro)
    if not signs:
        return []
    if not force:
        raise ManagedByOperator(OWNER, signs[0])
    return [f"taking the runtime configuration over from {OWNER} (--force): {signs[0]}"]
