"""The seam every package manager backend fits: :class:`PackageBackend`, and what dpkg and rpm share."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Protocol, Sequence

from installer.target import Requirement
from plumbing.errors import ToolError

_SAFE_VERSION = re.compile(r"^[A-Za-z0-9.:~^+_-]+$")


class PackageBackend(Protocol):
    """What the installer needs from dpkg or rpm (pipx ``backends/_base.py`` style)."""

    name: str  #: "dpkg" or "rpm"

    def installed_version(self, name: str) -> Optional[str]:
        """The installed version of ``name`` or None (half-installed counts as not installed)."""
        ...

    def installed_versions(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        """:meth:`installed_version` of each of ``names``, asked at once where the tool allows."""
        ...

    def package_state(self, name: str) -> str:
        """A human phrase for ``name``'s state: ``1.17.8-1 (installed)``, ``not installed``, ..."""
        ...

    def provides(self, requirement: Requirement) -> bool:
        """True when an installed package satisfies ``requirement`` (name and version constraint)."""
        ...

    def compare_versions(self, a: str, b: str) -> int:
        """-1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``."""
        ...

    def install(self, files: Sequence[Path], *, allow_downgrade: bool = False) -> None:
        """Install ``files`` (already in dependency order) in one transaction."""
        ...

    def remove(self, names: Sequence[str], *, purge: bool = False) -> None:
        """Remove ``names`` (already in reverse dependency order); ``purge`` also drops their config files (dpkg)."""
        ...

    def without_trace(self, names: Sequence[str]) -> List[str]:
        """Those of ``names`` (not installed) of which the database keeps nothing, not even config files."""
        ...

    def hold(self, names: Sequence[str]) -> None:
        """Keep ``names`` at their installed versions (apt-mark hold / dnf versionlock)."""
        ...

    def unhold(self, names: Sequence[str]) -> None:
        """Undo :meth:`hold`."""
        ...

    def config_files(self, names: Sequence[str]) -> List[str]:
        """The configuration files (node paths) the database lists for ``names``: dpkg conffiles, rpm %config."""
        ...

    def held(self, names: Sequence[str]) -> List[str]:
        """Those of ``names`` that are held now (by :meth:`hold`, ``apt-mark hold`` or ``dnf versionlock``)."""
        ...


_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def package_manager_env() -> Dict[str, str]:
    """PATH for dpkg and rpm runs: theirs must hold the sbin directories.

    dpkg refuses to run without ``ldconfig`` and ``start-stop-daemon`` on PATH, and maintainer
    scripts call tools from sbin; an admin's ``sudo`` or a minimal ``env -i`` PATH may lack them.
    """
    parts = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p]
    return {"PATH": os.pathsep.join([*parts, *(d for d in _SBIN_DIRS if d not in parts)])}


def check_version(version: str) -> str:
    """``version``, unless it has characters no package version uses (it is passed to the tools and rpm's lua).

    :raises ToolError: naming the refused string.
    """
    if not _SAFE_VERSION.match(version):
        raise ToolError(f"refusing the version string {version!r}: it has characters no package version uses")
    return version
