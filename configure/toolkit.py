"""The NVIDIA Container Runtime's own config: ``[nvidia-container-runtime] mode``.

``/etc/nvidia-container-runtime/config.toml`` is created by the toolkit package's postinst and is
full of commented-out defaults. We change one key with tomlkit, so every other key, comment and
blank line stays as it was. A commented ``#mode = ...`` line is left in place and a real key is
added after it. A missing file gets just ``[nvidia-container-runtime] mode = ...`` (the runtime
fills in every other default) and a warning, since it usually means the toolkit is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import tomlkit
from tomlkit.items import Table

from configure import tomledit
from configure.changes import FileChange, read_optional
from configure.engine import ConfigPlan
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted
from plumbing.textio import decode_utf8

TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
SECTION = "nvidia-container-runtime"
#: the modes nvidia-container-runtime understands (internal/info/auto.go); jit-cdi since v1.18.0
MODES = ("auto", "cdi", "legacy", "csv", "jit-cdi")
ENGINE = "toolkit"


def current_mode(text: str, path: object = TOOLKIT_CONFIG) -> Optional[str]:
    """The ``mode`` set in ``text``, or None when it is left to the runtime's default (auto)."""
    return get_key(text, SECTION, "mode", path)


def set_mode(text: str, mode: str, path: object = TOOLKIT_CONFIG) -> str:
    """Return ``text`` with ``[nvidia-container-runtime] mode = <mode>``, everything else unchanged."""
    if mode not in MODES:
        raise UsageError(f"unknown runtime mode {mode!r}; choose one of {', '.join(MODES)}")
    return set_key(text, SECTION, "mode", mode, path)


def get_key(text: str, section: str, key: str, path: object = TOOLKIT_CONFIG) -> Optional[str]:
    """``[section] key`` in ``text``, or None when it is left to the runtime's default."""
    table = tomledit.parse_text(text, path).get(section)
    value = table.get(key) if isinstance(table, dict) else None
    return str(value) if value is not None else None


def set_key(text: str, section: str, key: str, value: str, path: object = TOOLKIT_CONFIG) -> str:
    """Return ``text`` with ``[section] key = value``, every other key, comment and blank line unchanged."""
    doc = tomledit.parse_text(text, path)
    if section not in doc:
        doc.add(section, tomlkit.table())
    table = doc[section]
    if not isinstance(table, Table):
        raise ConfigFormatError(path, f"[{section}] must be a TOML table")
    if table.get(key) != value:  # assigning the same value could still reformat the line
        table[key] = value
    return tomlkit.dumps(doc)


def plan_mode(root: Path, mode: str, config: str = TOOLKIT_CONFIG) -> ConfigPlan:
    """Plan setting the runtime mode in the toolkit config under ``root``; never writes."""
    path = rooted(root, config)
    old = read_optional(path)
    plan = ConfigPlan(engine=ENGINE)
    text = "" if old is None else decode_utf8(old, path)
    if old is None:
        plan.warnings.append(f"{path} does not exist (is nvidia-container-toolkit installed?); creating it")
    new = set_mode(text, mode, path).encode()
    plan.changes.append(FileChange(path, old, new, mode=0o644))
    plan.notes.update({"mode": mode, "previous_mode": current_mode(text, path)})
    plan.facts["MODE"] = mode
    return plan
