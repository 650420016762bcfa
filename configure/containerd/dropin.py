"""The containerd drop-in we write: regenerated when it is ours, added to when someone else wrote it.

See :mod:`configure.containerd.engine` ("Never replace a drop-in someone else wrote").
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

import tomlkit
from tomlkit.toml_document import TOMLDocument

from configure import tomledit
from configure.containerd.imports import plugin_table
from configure.journal import JournalEntry
from plumbing.errors import ConfigFormatError

DROP_IN_HEADER = "# Written by gpu-airgap (configure containerd); regenerated on every run. `gpu-airgap configure revert` undoes it.\n"


def drop_in_doc(
    foreign: Optional[TOMLDocument],
    old: Optional[bytes],
    path: Path,
    version: int,
    plugin: str,
    source: Dict[str, Any],
    source_path: Path,
    earlier: Set[str],
) -> TOMLDocument:
    """The drop-in before our runtime goes in: someone else's file, or ours regenerated.

    Either holds the CRI table containerd would use without our changes (``source``). Ours is
    rebuilt from it, keeping the runtimes of ``earlier`` runs (``--runtime-name gpu`` after
    ``nvidia`` keeps both); someone else's file is only added to.
    """
    if foreign is not None:
        tomledit.merge(foreign, {"plugins": {plugin: source}}, path=source_path)
        return foreign
    target = tomlkit.document()
    target.add(tomlkit.comment(DROP_IN_HEADER.strip()[2:]))
    target.add("version", version)
    tomledit.merge(target, {"plugins": {plugin: source}}, path=source_path)
    if not earlier or old is None:
        return target
    previous = plugin_table(tomledit.load(path, old), plugin)
    containerd = (previous or {}).get("containerd")
    runtimes = containerd.get("runtimes") if isinstance(containerd, dict) else None
    if not isinstance(runtimes, dict):
        return target
    kept = {name: entry for name, entry in runtimes.items() if name in earlier}
    if kept:
        tomledit.merge(target, {"plugins": {plugin: {"containerd": {"runtimes": kept}}}}, path=path)
    return target


def foreign_drop_in(
    path: Optional[Path], old: Optional[bytes], version: int, entries: List[JournalEntry]
) -> Optional[TOMLDocument]:
    """The parsed drop-in at ``path`` when someone else wrote it (it must be kept), else None.

    Ours is a drop-in gpu-airgap generated (it starts with our header) whose bytes are still the
    ones a configure run wrote (their digest is in the journal ``entries``): we regenerate it.
    Anything else with content is added to: an admin's own ``99-nvidia.toml`` (also after we added
    to it once: it never gets our header), or one we generated and someone edited since.

    :raises ConfigFormatError: when it declares a config version other than the root config's.
    """
    if path is None or old is None or not old.strip():
        return None
    if old.startswith(DROP_IN_HEADER.encode()) and hashlib.sha256(old).hexdigest() in {
        entry.sha256 for entry in entries
    }:
        return None
    doc = tomledit.parse(path, old)
    declared = doc.get("version")
    if declared is not None and declared != version:
        raise ConfigFormatError(
            path,
            f"was not written by gpu-airgap and has config version {declared!r}, not {version} like the root "
            f"config; gpu-airgap adds to it but will not mix versions: give it version {version}, move it aside, or "
            "write to another file (`gpu-airgap configure containerd --drop-in FILE`)",
        )
    return doc
