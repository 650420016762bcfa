"""Taking the toolkit's packages off a node: what a removal leaves behind, and ``uninstall --purge``, which leaves nothing.

- dpkg: ``dpkg --remove`` keeps a package's conffiles and the package in state ``rc`` (``removed,
  config files remain``); ``dpkg --purge`` drops both (edited conffiles too, as ``apt purge`` does).
- rpm: ``rpm -e`` deletes the %config files, except one edited since the install, which it keeps as
  ``FILE.rpmsave``; rpm has no ``rc`` state, so ``--purge`` deletes those copies.
- Neither removes a file the packages' own scripts generated: NVIDIA's ``-base`` postinst and %post
  write ``/etc/nvidia-container-runtime/config.toml`` with ``nvidia-ctk config --in-place``. ``--purge``
  deletes it (:data:`GENERATED`).

Without ``--purge`` the uninstall says what stays, with the state of each package.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence

from installer.backends.base import PackageBackend
from installer.rollback import is_present
from plumbing.errors import ToolError
from plumbing.fsutil import rooted

#: files the toolkit packages' maintainer scripts write (no package owns them); ``--purge`` deletes them
GENERATED = ("/etc/nvidia-container-runtime/config.toml",)
RPMSAVE = ".rpmsave"


@dataclass
class Removal:
    """The packages an uninstall takes off the node, decided before anything changes."""

    root: Path
    purge: bool
    names: List[str]  #: installed (or half-installed) packages to remove, in removal order
    leftover: List[str] = field(
        default_factory=list
    )  #: removed earlier, config files remaining (dpkg ``rc``)
    configs: List[str] = field(default_factory=list)  #: the config files of both (node paths)
    generated: bool = True  #: the scripts' :data:`GENERATED` files go too (no toolkit package stays)

    @property
    def taken(self) -> List[str]:
        """What the package manager is asked to remove: with ``--purge`` the leftovers too."""
        return [*self.names, *(self.leftover if self.purge else [])]

    def files_left(self) -> List[str]:
        """Config files (or rpm's ``.rpmsave`` copies) and generated files still under the root (node paths)."""
        candidates = [
            *self.configs,
            *(path + RPMSAVE for path in self.configs),
            *(GENERATED if self.generated else ()),
        ]
        return [path for path in dict.fromkeys(candidates) if rooted(self.root, path).is_file()]


def plan_removal(backend: PackageBackend, root: Path, names: Sequence[str], *, purge: bool) -> Removal:
    """Which of ``names`` (in removal order) to remove, and their config files, read before the removal."""
    present = [name for name in names if is_present(backend, name)]
    leftover = _config_files_remain(backend, names, present)
    return Removal(root, purge, present, leftover, backend.config_files([*present, *leftover]))


def _config_files_remain(backend: PackageBackend, names: Sequence[str], present: Sequence[str]) -> List[str]:
    """Those of ``names`` removed earlier whose config files stay (dpkg ``rc``; rpm has no such state)."""
    return [n for n in names if n not in present and "config files remain" in backend.package_state(n)]


def remove(backend: PackageBackend, removal: Removal) -> List[str]:
    """Remove (``--purge``: purge) the packages; return what was deleted besides them, or what stays, in sentences."""
    backend.remove(removal.taken, purge=removal.purge)
    if not removal.purge:
        return _what_stays(backend, removal)
    deleted = []
    for path in removal.files_left():  # the package manager's own purge ran: only unowned files are left
        with contextlib.suppress(FileNotFoundError):
            rooted(removal.root, path).unlink()
        deleted.append(path)
    lines = [f"purged {', '.join(removal.taken)}: no config files remain"] if removal.taken else []
    return lines + (
        [f"deleted {', '.join(deleted)} (left by the packages' scripts or rpm)"] if deleted else []
    )


def describe(removal: Removal) -> List[str]:
    """What :func:`remove` would do, for ``--dry-run``."""
    if not removal.purge:
        return []
    lines = [f"would purge {', '.join(removal.taken)} with their config files"] if removal.taken else []
    left = removal.files_left()
    return lines + ([f"would delete {', '.join(left)}"] if left else [])


def _what_stays(backend: PackageBackend, removal: Removal) -> List[str]:
    states = [f"{name} {backend.package_state(name)}" for name in removal.taken]
    kept = [state for state in states if "config files remain" in state]
    files = removal.files_left()
    if not kept and not files:
        return []
    what = "; ".join([*kept, *(["files " + ", ".join(files)] if files else [])])
    return [f"left on the node: {what} (`gpu-airgap uninstall --purge` removes them)"]


def plan_leftovers(backend: PackageBackend, root: Path, names: Sequence[str]) -> Removal:
    """``uninstall --purge`` with no install recorded: what an earlier uninstall (or removal) left of ``names``.

    Installed packages are not gpu-airgap's to remove without a record; config files of removed
    ones, and the generated files once no toolkit package is installed, are.

    :raises ToolError: when nothing is left (the usual "nothing to uninstall").
    """
    installed = [name for name in names if is_present(backend, name)]
    leftover = _config_files_remain(backend, names, installed)
    # only the removed packages' config files: an installed package's are not ours to delete
    removal = Removal(root, True, [], leftover, backend.config_files(leftover), generated=not installed)
    left = removal.leftover or removal.files_left()
    if not left:
        raise ToolError(f"nothing to uninstall: gpu-airgap has no install recorded under {root}")
    return removal
