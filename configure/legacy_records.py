"""Records of gpu-airgap before node paths: host paths with the ``--root`` prefix, read as node paths.

Older versions recorded ``/build/img/etc/containerd/config.toml`` in ``state.json`` and the
configure journal. The root each path was recorded under is read off its backup
(``/build/img/var/lib/gpu-airgap/configure/backups/...``); taking it off gives the node path, which
is then resolved under the current ``--root`` like any other. A path that is not under the root it
was recorded for is refused, never followed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import List, Optional

from configure.changes import STATE_DIR
from plumbing.errors import ConfigFormatError
from plumbing.fsutil import is_live_root, is_node_path


def legacy_root(backup: object) -> Optional[str]:
    """The root an older journal's backup was recorded under (``""`` for ``/``), read off its host path."""
    marker = STATE_DIR + "/backups/"
    if not isinstance(backup, str) or marker not in backup:
        return None
    return backup[: backup.rindex(marker)]


def legacy_roots(backups: Sequence[Optional[str]], root: Path) -> List[str]:
    """The root each entry of an older record was recorded under (``""`` for ``/``), read off the backups.

    An entry without a backup (a new file) was recorded under the root of the others; with no
    backup at all, under ``root`` itself (a record that was not copied or moved).
    """
    found = [legacy_root(backup) for backup in backups]
    fallback = next((r for r in found if r is not None), "" if is_live_root(root) else os.path.abspath(root))
    return [fallback if r is None else r for r in found]


def from_legacy(recorded: object, old_root: str, record: Path) -> str:
    """The node path of a host path an older version recorded under ``old_root`` (``""``: ``/``).

    :raises ConfigFormatError: when ``recorded`` is not under ``old_root``.
    """
    if not isinstance(recorded, str):
        return repr(recorded)  # not a node path either: refused where it is resolved
    if old_root == "":  # recorded under / : host paths were node paths
        return recorded
    if recorded.startswith(old_root + "/") and is_node_path(recorded[len(old_root) :]):
        return recorded[len(old_root) :]
    raise ConfigFormatError(
        record,
        f"names {recorded!r}, which is not under the root it was recorded for ({old_root}); refusing to act on it",
    )
