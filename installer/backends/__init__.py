"""The node's own package manager behind one seam: :class:`PackageBackend`, with dpkg and rpm.

Every command goes through :func:`plumbing.proc.run` and honours ``--root`` the way the tools
themselves do: ``dpkg --root=DIR`` (whose admin directory is ``DIR/var/lib/dpkg``),
``dpkg-query --admindir=DIR/var/lib/dpkg``, and ``rpm --root DIR --dbpath PATH`` (``PATH`` is the
database the node itself uses, found under the root; passing it explicitly matters because some
hosts, Debian's rpm for one, default to ``~/.rpmdb``).

Maintainer scripts: with ``--root`` dpkg and rpm chroot into the root to run them, which is right
for a node image or chroot with a real userland. We do not pass ``--force-script-chrootless`` or
``--noscripts``: the first would run the packages' scripts against the *host*, the second would
silently skip steps (ldconfig) the real node needs. A script that fails is named in
:class:`MaintainerScriptFailed` (parsed from dpkg's and rpm's own messages); rpm only *warns* when a
``%post``/``%posttrans`` fails and still exits 0, so its warnings are read too.

Modules: :mod:`~installer.backends.base` (the protocol and what both tools share),
:mod:`~installer.backends.dpkg`, :mod:`~installer.backends.rpm` and :mod:`~installer.backends.scripts`
(failed maintainer scripts). The in-memory backend of the pure unit tests is ``tests/fakes.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from installer.backends.base import PackageBackend
from installer.backends.dpkg import DpkgBackend
from installer.backends.rpm import RpmBackend
from plumbing.errors import ToolError


def make_backend(
    package_format: Optional[str], root: Path, rpm_dbpath: Optional[str] = None
) -> PackageBackend:
    """The backend for the node's package format.

    :raises ToolError: when the node has neither dpkg nor rpm.
    """
    if package_format == "deb":
        return DpkgBackend(root)
    if package_format == "rpm":
        return RpmBackend(root, rpm_dbpath)
    raise ToolError(
        f"found neither a dpkg nor an rpm database under {root}; this node cannot install packages"
    )
