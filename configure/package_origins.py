"""Where each installed toolkit package came from, as far as the node knows (``status``).

gpu-airgap's own record names what it installed; dnf 4 keeps the repository of every transaction
in its history database; dpkg keeps no source at all, so on deb nodes the repositories whose
downloaded apt lists offer exactly the installed version are named instead.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Dict, Mapping, Optional

from configure.node_repos import apt_offers, node_sources
from plumbing.fsutil import rooted_or_none

#: dnf 4's transaction history (dnf 5 keeps its own elsewhere and is not read).
DNF_HISTORY = "/var/lib/dnf/history.sqlite"
BUNDLE_ORIGIN = "a gpu-airgap bundle"


def dnf_history_repo(root: Path, name: str, version: str) -> Optional[str]:
    """The repository id dnf's history records for the latest transaction of ``name`` at ``version``.

    ``version`` is ``[EPOCH:]VERSION-RELEASE``; only the actions that put it there count (install,
    downgrade, obsoleting, upgrade, reinstall: libdnf's codes 1, 2, 4, 6, 9). The database is opened read-only and immutable, so
    a running dnf is neither blocked nor disturbed. None when dnf has no record (an ``rpm -i``).
    """
    try:
        import sqlite3  # here: only rpm nodes with dnf history need it, and a minimal python may lack it
    except ImportError:
        return None
    path = rooted_or_none(root, DNF_HISTORY)
    if path is None or not path.is_file():
        return None
    evr = version.split(":", 1)[-1]
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        ) as db:
            row = db.execute(
                "SELECT repo.repoid FROM trans_item JOIN rpm ON trans_item.item_id = rpm.item_id "
                "JOIN repo ON trans_item.repo_id = repo.id "
                "WHERE rpm.name = ? AND rpm.version || '-' || rpm.release = ? AND trans_item.action IN (1, 2, 4, 6, 9) "
                "ORDER BY trans_item.id DESC LIMIT 1",
                (name, evr),
            ).fetchone()
    except sqlite3.Error:
        return None  # another dnf's schema, or a damaged file: unknown, not an error of ours
    return str(row[0]) if row and row[0] not in ("@System", "@commandline") else None


def package_origins(
    root: Path,
    installed: Mapping[str, Optional[str]],
    package_format: Optional[str],
    ours: Mapping[str, str],
) -> Dict[str, Optional[str]]:
    """Where each installed package came from, as far as the node knows; None when it does not.

    * the version gpu-airgap recorded installing (``ours``): ``a gpu-airgap bundle``;
    * rpm: the repository dnf's history names, with its URL from the node's ``.repo`` files;
    * deb: dpkg records no source, so the repositories whose downloaded apt lists offer exactly
      the installed version are named (``apt lists: URL``).
    """
    present = {name: version for name, version in installed.items() if version}
    origins: Dict[str, Optional[str]] = dict.fromkeys(installed)
    offers = apt_offers(root, list(present)) if package_format == "deb" else {}
    urls = {s.section: s.url for s in node_sources(root) if s.kind == "yum"}
    for name, version in present.items():
        if ours.get(name) == version:
            origins[name] = BUNDLE_ORIGIN
        elif package_format == "rpm":
            repo = dnf_history_repo(root, name, version)
            origins[name] = f"{repo} ({urls[repo]})" if repo in urls else repo
        else:
            repos = [_repo_base(url) for url, found in offers.items() if (name, version) in found]
            origins[name] = f"apt lists: {', '.join(repos)}" if repos else None
    return origins


def _repo_base(list_url: str) -> str:
    """``archive.ubuntu.com/ubuntu`` for ``archive.ubuntu.com/ubuntu/dists/noble/universe/binary-amd64``."""
    return list_url.split("/dists/", 1)[0]
