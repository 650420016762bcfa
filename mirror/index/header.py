"""A package's own header, and whether it agrees with the signed index entry it was fetched for.

A signed index (apt ``Packages``, yum ``primary.xml``) vouches for a file by its digest, and the
resolver chooses packages by what the index says they are. The package manager on the node,
however, acts on what the file says it is: its own control data (``.deb``) or header (``.rpm``).
If the two disagree - an index re-signed over the digest of another package - the node would
install something else than what was resolved. So a package is read here, after its digest
matched, and refused when it disagrees:

- ``.deb``: python-debian's :class:`~debian.debfile.DebFile` reads the ``ar`` member headers and
  the ``control.tar`` member, never the ``data.tar`` payload; ``Package``, ``Version``,
  ``Architecture`` and the relationship fields must equal the ``Packages`` entry's.
- ``.rpm``: :mod:`rpmfile` reads the lead and the signature and main headers, never the cpio
  payload; name, ``[epoch:]version-release`` and arch must equal primary.xml's, and so must the
  requires - every entry primary.xml lists must be in the header, and the header may add only what
  createrepo_c leaves out of primary (``rpmlib(...)``, file and soname requires such as
  ``/bin/sh`` or ``libc.so.6(GLIBC_2.2.5)(64bit)``, and what the package provides itself).
  The header's file digest algorithm (FILEDIGESTALGO) is kept too: MD5/SHA-1 rpms do not install on
  FIPS nodes (:mod:`installer.fips`).

Reading a header costs well under a millisecond (``dpkg-deb -f`` and ``rpm -qp`` took 5-13 ms).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import rpmfile
from debian.arfile import ArError
from debian.debfile import DebError, DebFile
from rpmfile.errors import RPMError

from installer.fips import digest_name
from mirror.errors import HeaderMismatch, UnreadablePackage
from mirror.index.apt import parse_relations
from mirror.model import Package, Relations

#: rpm's RPMSENSE_LESS | GREATER | EQUAL bits, spelled as primary.xml entries are by :mod:`mirror.index.rpm`.
_RPM_OPS: Final = {2: "<<", 4: ">>", 8: "=", 10: "<=", 12: ">="}
#: ... and as ``rpm -qp --requires`` prints them (the manifest's ``depends``).
_RPM_SHOWN: Final = {2: "<", 4: ">", 8: "=", 10: "<=", 12: ">="}
_DEB_RELATIONS: Final = ("Pre-Depends", "Depends", "Breaks", "Conflicts", "Replaces", "Provides")

Requirement = tuple[
    str, str | None, str | None
]  #: (name, op, version) the way mirror.index.rpm models requires


@dataclass(frozen=True)
class PackageHeader:
    """What a package file says about itself."""

    format: str  #: ``deb`` or ``rpm``
    name: str
    version: str  #: deb ``Version``; rpm ``[epoch:]version-release`` (epoch 0 omitted, as in primary.xml)
    arch: str
    #: deb: every control field in order; rpm: Name, Epoch (when set), Version, Release, Arch
    fields: tuple[tuple[str, str], ...]
    requires: tuple[Requirement, ...] = ()  #: rpm only: every require but ``rpmlib(...)``
    provides: tuple[str, ...] = ()  #: rpm only: provided names
    file_digest_algo: str | None = None  #: rpm only: the algorithm of its file digests (``md5``, ``sha256``)

    @property
    def depends(self) -> tuple[str, ...]:
        """The dependencies as the manifest lists them: deb Pre-Depends then Depends items; rpm requires."""
        if self.format == "deb":
            value = ", ".join(
                v for key in ("Pre-Depends", "Depends") for k, v in self.fields if k.lower() == key.lower()
            )
            return tuple(d.strip() for d in value.replace("\n", " ").split(",") if d.strip())
        return tuple(_requirement_text(r) for r in self.requires)

    def shown(self) -> tuple[tuple[str, str], ...]:
        """The fields ``bundle inspect`` shows: identity and relations, not descriptions."""
        if self.format == "deb":
            keep = {"package", "version", "architecture", *(r.lower() for r in _DEB_RELATIONS)}
            return tuple((k, v.replace("\n", " ")) for k, v in self.fields if k.lower() in keep)
        return (*self.fields, ("Requires", ", ".join(self.depends)))

    def to_json(self) -> dict[str, Any]:
        """The cacheable form."""
        return {
            "format": self.format,
            "name": self.name,
            "version": self.version,
            "arch": self.arch,
            "fields": [list(f) for f in self.fields],
            "requires": [list(r) for r in self.requires],
            "provides": list(self.provides),
            "file_digest_algo": self.file_digest_algo,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> PackageHeader:
        """Inverse of :meth:`to_json`; raises KeyError/TypeError/ValueError on anything else."""
        return cls(
            format=str(raw["format"]),
            name=str(raw["name"]),
            version=str(raw["version"]),
            arch=str(raw["arch"]),
            fields=tuple((str(k), str(v)) for k, v in raw["fields"]),
            requires=tuple(
                (str(n), o if o is None else str(o), v if v is None else str(v))
                for n, o, v in raw["requires"]
            ),
            provides=tuple(str(p) for p in raw["provides"]),
            file_digest_algo=None if raw["file_digest_algo"] is None else str(raw["file_digest_algo"]),
        )


#: primary.xml's op spelling -> rpm's (``<<`` -> ``<``).
_RPM_SHOWN_BY_OP: Final = {op: _RPM_SHOWN[bits] for bits, op in _RPM_OPS.items()}


def read_header(path: Path, fmt: str, *, what: str) -> PackageHeader:
    """Read the header of the package file ``path`` (whose digest the caller has already checked).

    :param what: how to name the file in an error (its path in the mirror).
    :raises UnreadablePackage: when the file is not a readable ``.deb`` / ``.rpm``.
    """
    try:
        return _read_deb(path) if fmt == "deb" else _read_rpm(path)
    except (OSError, EOFError, ValueError, KeyError, IndexError, ArError, DebError, RPMError) as exc:
        raise UnreadablePackage(what, fmt, f"{type(exc).__name__}: {exc}") from exc


def _read_deb(path: Path) -> PackageHeader:
    control = DebFile(filename=str(path)).debcontrol()
    fields = tuple((str(k), str(v)) for k, v in control.items())
    return PackageHeader("deb", control["Package"], control["Version"], control["Architecture"], fields)


def _read_rpm(path: Path) -> PackageHeader:
    with rpmfile.open(str(path)) as package:
        headers = package.headers
    name, version, release, arch = (_text(headers[key]) for key in ("name", "version", "release", "arch"))
    epoch = headers.get("serial")
    evr = f"{version}-{release}"
    fields = [("Name", name), ("Version", version), ("Release", release), ("Arch", arch)]
    epoch_text = _text(epoch)
    if epoch_text not in ("", "0"):
        evr = f"{epoch_text}:{evr}"
        fields.insert(1, ("Epoch", epoch_text))
    requires: list[Requirement] = []
    for req_name, flags, req_version in zip(
        _list(headers.get("requirename")),
        _list(headers.get("requireflags")),
        _list(headers.get("requireversion")),
    ):
        text, bound = _text(req_name), _text(req_version).removeprefix("0:")
        if text.startswith("rpmlib("):
            continue  # rpm satisfies its own features; primary.xml drops them too
        op = _RPM_OPS.get(int(flags) & 14) if bound else None
        requirement = (text, op, bound if op else None)
        if requirement not in requires:
            requires.append(requirement)
    provides = tuple(_text(p) for p in _list(headers.get("provides")))
    algo = _list(headers.get("filedigestalgo"))  # tag 5011; rpm reads an rpm without it as MD5
    digest = digest_name(int(algo[0]) if algo else None)
    return PackageHeader("rpm", name, evr, arch, tuple(fields), tuple(requires), provides, digest)


def check_agrees(header: PackageHeader, entry: Package, *, what: str) -> None:
    """Refuse a package whose own header disagrees with the signed index entry it was fetched for.

    :param what: the file, as the error names it (its path in the mirror).
    :raises HeaderMismatch: naming what differs, with the header's value and the entry's.
    """
    detail = _disagreement(header, entry)
    if detail is not None:
        raise HeaderMismatch(what, "Packages" if header.format == "deb" else "primary.xml", detail)


def _disagreement(header: PackageHeader, entry: Package) -> str | None:
    own = "its own control data" if header.format == "deb" else "its own header"
    for field, mine, listed in (
        ("name", header.name, entry.name),
        ("version", header.version, entry.version),
        ("arch", header.arch, entry.arch),
    ):
        if mine != listed:
            return f"{own} says {field} {mine}, the entry says {listed}"
    if header.format == "deb":
        for field, mine_rel, listed_rel in _deb_relations(header, entry):
            if mine_rel != listed_rel:
                return f"{own} says {field}: {_relations_text(mine_rel)}, the entry says {field}: {_relations_text(listed_rel)}"
        return None
    listed_req = [(r.name, r.op, r.version) for group in entry.depends for r in group]
    for requirement in listed_req:
        if requirement not in header.requires:
            return f"the entry requires {_requirement_text(requirement)}, which {own} does not"
    for requirement in header.requires:
        if requirement not in listed_req and not _left_out_by_createrepo(requirement, header, listed_req):
            return f"{own} requires {_requirement_text(requirement)}, which the entry does not"
    return None


def _deb_relations(header: PackageHeader, entry: Package) -> list[tuple[str, Relations, Relations]]:
    def parsed(*keys: str) -> Relations:
        wanted = {key.lower() for key in keys}
        return sum((parse_relations(v) for k, v in header.fields if k.lower() in wanted), ())

    return [
        ("Depends", parsed("Pre-Depends", "Depends"), entry.depends),
        ("Breaks", parsed("Breaks"), entry.breaks),
        ("Conflicts", parsed("Conflicts"), entry.conflicts),
        ("Replaces", parsed("Replaces"), entry.replaces),
        (
            "Provides",
            tuple((r,) for group in parsed("Provides") for r in group),
            tuple((r,) for r in entry.provides),
        ),
    ]


def _relations_text(relations: Relations) -> str:
    return ", ".join(" | ".join(str(r) for r in group) for group in relations) or "(none)"


def _requirement_text(requirement: Requirement) -> str:
    name, op, version = requirement
    return f"{name} {_RPM_SHOWN_BY_OP[op]} {version}" if op and version else name


def _left_out_by_createrepo(
    requirement: Requirement, header: PackageHeader, listed: Sequence[Requirement]
) -> bool:
    """True for a require createrepo_c keeps out of primary.xml: file and soname requires, and self-provided ones."""
    name = requirement[0]
    if name.startswith("/") or "(" in name:
        return True
    return name in header.provides and name not in {r[0] for r in listed}


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)) and value:
        return _text(value[0])
    return "" if value is None else str(value)


def _list(value: object) -> list[Any]:
    """rpmfile gives an array tag as a list or tuple, and a one-element one as the element itself."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
