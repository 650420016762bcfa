"""The records every part of the mirror shares: packages from signed indexes, and relations.

These are plain frozen dataclasses with no I/O. :mod:`mirror.index.apt` and :mod:`mirror.index.rpm` build
them from verified metadata, ``resolve`` chooses among them, ``sync`` downloads what they name and the
bundle builder copies them across the air gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

#: NVIDIA's channels (``--channel``) and the bundle compressions (``--compression``), here so the
#: command line can offer them without importing the modules that work with them
STABLE, EXPERIMENTAL = "stable", "experimental"
CHANNELS = (STABLE, EXPERIMENTAL)
COMPRESSIONS = ("zstd", "xz", "gzip", "none")


class PackageFormat(str, Enum):
    """The two package worlds NVIDIA publishes."""

    DEB = "deb"
    RPM = "rpm"


@dataclass(frozen=True)
class Relation:
    """One versioned reference to a package: ``libnvidia-container-tools (>= 1.17.8-1)``.

    ``op`` is one of ``=``, ``>=``, ``<=``, ``<<``, ``>>`` (rpm's ``<`` and ``>`` are stored as
    ``<<`` and ``>>``) or ``None`` for an unversioned reference. rpm rich/boolean dependencies and
    file requires are kept in ``raw``.
    """

    name: str
    op: str | None = None
    version: str | None = None
    raw: str = ""

    def __str__(self) -> str:
        return self.raw or (f"{self.name} ({self.op} {self.version})" if self.op else self.name)


#: An AND-list of OR-groups, the shape of Depends/Requires: ``[[a], [b, c]]`` means ``a, b | c``.
Relations = tuple[tuple[Relation, ...], ...]


@dataclass(frozen=True)
class Package:
    """One package as a signed index describes it.

    ``filename`` is relative to the repository base exactly as the index names it (``./x.deb``
    for NVIDIA's flat apt repos, ``x.rpm`` for yum ``location href``); it must go through
    :func:`plumbing.fsutil.safe_join` before touching the disk.
    """

    format: PackageFormat
    name: str
    version: str  #: full version: deb ``[epoch:]upstream-revision``, rpm ``[epoch:]version-release``
    arch: str
    filename: str
    size: int
    sha256: str | None = None
    sha512: str | None = None
    depends: Relations = ()
    breaks: Relations = ()
    conflicts: Relations = ()  #: deb Conflicts, rpm Conflicts
    replaces: Relations = ()  #: deb Replaces, rpm Obsoletes
    provides: tuple[Relation, ...] = ()
    fields: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity within one repository: (name, version, arch)."""
        return (self.name, self.version, self.arch)


@dataclass(frozen=True)
class SourcePackage:
    """A package file in the mirror, with the digests its signed metadata gave."""

    name: str
    version: str
    arch: str
    path: Path  #: absolute path of the file in the mirror
    size: int
    sha256: str | None
    sha512: str | None
    origin: str  #: upstream URL
    #: the signed index entry it was fetched for, when the caller checks the package against it (a bundle build)
    entry: Package | None = None
