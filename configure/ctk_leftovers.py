"""containerd drop-ins an older nvidia-ctk left where they do harm, found from :data:`configure.releases.RELEASES`.

nvidia-ctk 1.18.0 wrote its containerd drop-in to ``/etc/containerd/config.d/99-nvidia.toml`` and
pointed ``imports`` at ``config.d/*.toml``; 1.18.1 moved both to ``conf.d``, containerd's own drop-in
directory. A node that met 1.18.0 can keep that file after an upgrade. Two cases hurt:

- containerd does not load it (the root config imports nothing from ``config.d``), so the runtime it
  registers is not there, and it will come back to life if someone adds that import;
- containerd loads it *and* another file that defines the same runtime, so the runtime is defined
  twice and whichever file loads last wins (before containerd 2.1 it replaces the whole CRI table).

An imported ``config.d`` drop-in that is the only definition works and is left alone. The paths come
from the table (a row whose drop-in path differs from the newest row's), never from this module.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from configure import tomledit
from configure.changes import read_optional
from configure.containerd.imports import ConfigFile, load_chain
from configure.releases import RELEASES, ToolkitRelease
from plumbing.errors import ToolError
from plumbing.fsutil import rooted

DEFAULT_CONFIG = "/etc/containerd/config.toml"


def outdated_drop_ins(rows: Sequence[ToolkitRelease] = RELEASES) -> List[Tuple[str, ToolkitRelease]]:
    """Each containerd drop-in path an older row wrote that the newest row no longer writes, with that row."""
    current = rows[-1].containerd_drop_in
    return [(row.containerd_drop_in, row) for row in rows if row.containerd_drop_in not in (None, current)]


def defines_runtime(data: Dict[str, Any], name: str) -> bool:
    """True when one file registers ``name`` under any plugin's ``containerd.runtimes`` (v1, v2 or v3)."""
    plugins = data.get("plugins")
    if not isinstance(plugins, dict):
        return False
    for table in plugins.values():
        containerd = table.get("containerd") if isinstance(table, dict) else None
        runtimes = containerd.get("runtimes") if isinstance(containerd, dict) else None
        if isinstance(runtimes, dict) and isinstance(runtimes.get(name), dict):
            return True
    return False


def containerd_leftovers(root: Path, config: Optional[str] = None, runtime_name: str = "nvidia") -> List[str]:
    """One sentence per outdated nvidia-ctk drop-in under ``root`` that containerd ignores or reads twice.

    :param config: the root config containerd reads (node path); ``/etc/containerd/config.toml`` by default.
    """
    config_node = config or DEFAULT_CONFIG
    present = [(path, row) for path, row in outdated_drop_ins() if rooted(root, path).is_file()]
    if not present:
        return []
    chain = _chain(root, config_node)  # once: every leftover is judged against the same chain
    problems = (_problem(path, row, config_node, chain, runtime_name) for path, row in present)
    return [problem for problem in problems if problem]


def _chain(root: Path, config_node: str) -> Optional[List[ConfigFile]]:
    """What containerd loads from ``config_node``; None when it cannot be read (other checks say why)."""
    raw = read_optional(rooted(root, config_node))
    if raw is None:
        return []  # no config: containerd runs on its defaults and imports nothing
    try:
        return load_chain(root, config_node, tomledit.parse(rooted(root, config_node), raw).unwrap())
    except ToolError:
        return None


def _problem(
    path: str, row: ToolkitRelease, config_node: str, chain: Optional[List[ConfigFile]], runtime_name: str
) -> str:
    if chain is None:
        return ""
    directory = posixpath.dirname(path)
    current = RELEASES[-1].containerd_drop_in
    origin = f"{path} is the containerd drop-in nvidia-ctk {row.label()} wrote to the wrong directory"
    loaded = [c.path for c in chain]
    if path not in loaded:
        return (
            f"{origin}; containerd does not read it because {config_node} imports nothing from {directory}/, "
            f"so delete it (its runtime belongs in {current}, which `gpu-airgap configure containerd` "
            f"or nvidia-ctk 1.18.1 or later writes)"
        )
    others = [c.path for c in chain if c.path != path and defines_runtime(c.data, runtime_name)]
    if not others:
        return ""  # imported and the only definition: it works
    last = next(p for p in reversed(loaded) if p == path or p in others)
    return (
        f"{origin}; containerd reads it as well as {', '.join(others)}, so the {runtime_name} runtime is "
        f"defined twice and the copy in {last} wins; delete it and remove {directory}/*.toml from the imports of {config_node}"
    )
