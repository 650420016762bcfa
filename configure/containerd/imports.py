"""How containerd reads a root config plus its ``imports``, modelled so we can reason about drop-ins.

containerd loads the root config, then every import breadth-first (each import may import
more), skipping files it has already loaded. An import is a path or a ``filepath.Glob`` pattern
(sorted matches); a relative one is relative to the directory of the file that names it.

Before containerd 2.1 the files are merged with ``plugins`` replaced *per plugin key*
(containerd/containerd#5837): a later file that defines ``plugins."io.containerd.grpc.v1.cri"``
replaces the whole CRI table of the earlier ones. From 2.1 on the merge is deep. We model the
by-key rule, because a drop-in written for it is also right under the deep merge (see
``configure.containerd.engine`` for why).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set

from configure import tomledit
from configure.changes import read_optional
from plumbing.errors import ConfigFormatError
from plumbing.fsutil import is_live_root, rooted

_GLOB_CHARS = ("*", "?", "[")


@dataclass
class ConfigFile:
    """One file containerd would load: its node path and its parsed content (plain data)."""

    path: str  #: node path, e.g. /etc/containerd/conf.d/10-foo.toml
    data: Dict[str, Any]
    ours: bool = False  #: the drop-in we are about to write (its current content is ignored)


def is_glob(pattern: str) -> bool:
    """True when ``pattern`` is a glob as containerd's ``filepath.Glob`` sees it."""
    return any(ch in pattern for ch in _GLOB_CHARS)


def absolute_import(parent: str, entry: str) -> str:
    """Resolve an ``imports`` entry of the file ``parent`` (node paths) as containerd does."""
    return posixpath.normpath(
        entry if entry.startswith("/") else posixpath.join(posixpath.dirname(parent), entry)
    )


def covers(pattern: str, path: str) -> bool:
    """True when the import ``pattern`` (absolute) loads ``path``: per segment, ``*`` never crosses ``/``."""
    pattern_parts, path_parts = pattern.split("/"), path.split("/")
    if len(pattern_parts) != len(path_parts):
        return False
    return all(fnmatch.fnmatchcase(name, pat) for pat, name in zip(pattern_parts, path_parts))


def imports_of(data: Dict[str, Any], path: str) -> List[str]:
    """The ``imports`` of one file as absolute node paths or patterns.

    :raises ConfigFormatError: when ``imports`` is not a list of strings.
    """
    entries = data.get("imports", [])
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ConfigFormatError(path, "imports must be a list of file paths")
    return [absolute_import(path, entry) for entry in entries]


def load_chain(
    root: Path,
    config_path: str,
    config_data: Dict[str, Any],
    *,
    ours: Optional[str] = None,
    ours_data: Optional[Dict[str, Any]] = None,
    extra_import: Optional[str] = None,
    warnings: Optional[List[str]] = None,
) -> List[ConfigFile]:
    """Every file containerd would load, in its order, starting with the root config.

    :param ours: node path of the drop-in we are writing; it takes its place in the order even if
        it does not exist yet, and its current content is not read.
    :param ours_data: the content of ``ours`` to load instead (a file someone else wrote that we
        add to, so what it holds counts); None: ours is regenerated, its content does not count.
    :param extra_import: an import we are about to append to the root config.
    :param warnings: collects imports that name missing files.
    :raises ConfigFormatError: naming any imported file that is not valid TOML.
    """
    chain: List[ConfigFile] = []
    pending: List[str] = [config_path]
    loaded: Set[str] = set()
    while pending:
        path, pending = pending[0], pending[1:]
        if path in loaded:
            continue
        loaded.add(path)
        if path == ours and ours_data is None:
            chain.append(ConfigFile(path, {}, ours=True))
            continue
        if path == config_path:
            data = config_data
        elif path == ours and ours_data is not None:
            data = ours_data
        else:
            raw = read_optional(rooted(root, path))
            if raw is None:
                if warnings is not None:
                    warnings.append(f"{path} is imported but does not exist; containerd will refuse to start")
                continue
            data = tomledit.load(rooted(root, path), raw)
        chain.append(ConfigFile(path, data, ours=path == ours))
        imports = imports_of(data, path)
        if path == config_path and extra_import is not None:
            imports.append(extra_import)
        pending.extend(_expand(root, imports, ours))
    return chain


def _expand(root: Path, imports: Sequence[str], ours: Optional[str]) -> List[str]:
    expanded: List[str] = []
    for entry in imports:
        if not is_glob(entry):
            expanded.append(entry)
            continue
        directory, pattern = posixpath.split(entry)
        if not is_glob(directory):
            # The usual /etc/containerd/conf.d/*.toml: match names in the directory (links in its
            # path resolved inside the root) and name them by the pattern's directory, as containerd does.
            found = glob.glob(os.path.join(glob.escape(str(rooted(root, directory))), pattern))  # noqa: PTH207
            matches = [posixpath.join(directory, os.path.basename(name)) for name in found]  # noqa: PTH119
        else:
            base = os.path.abspath(root)
            matches = [
                "/" + os.path.relpath(found, base) if not is_live_root(root) else found
                for found in glob.glob(str(rooted(root, entry)))  # noqa: PTH207 - patterns may glob directories too
            ]
        if ours is not None and covers(entry, ours) and ours not in matches:
            matches.append(ours)
        expanded.extend(sorted(matches))
    return expanded


def plugin_table(data: Dict[str, Any], plugin: str) -> Optional[Dict[str, Any]]:
    """``plugins.<plugin>`` of one file, or None when the file does not define it."""
    plugins = data.get("plugins")
    if isinstance(plugins, dict):
        table = plugins.get(plugin)
        if isinstance(table, dict):
            return table
    return None


def defining_file(chain: Sequence[ConfigFile], plugin: str) -> Optional[ConfigFile]:
    """The last file in the chain that defines ``plugin`` (the one containerd < 2.1 takes it from)."""
    return next((config for config in reversed(chain) if plugin_table(config.data, plugin) is not None), None)


def effective_plugin(chain: Sequence[ConfigFile], plugin: str) -> Dict[str, Any]:
    """The table containerd < 2.1 uses for ``plugin``: the last file in the chain that defines it."""
    found = defining_file(chain, plugin)
    return (plugin_table(found.data, plugin) if found is not None else None) or {}
