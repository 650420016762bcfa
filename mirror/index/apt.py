"""Read the two apt index formats a flat NVIDIA repository publishes: Release and Packages.

Formats
-------
Both are deb822 "control" files: paragraphs of ``Field: value`` lines separated by blank lines,
continuation lines start with a space.

``Release`` (here always the verified text inside ``InRelease``)
    One paragraph. ``Origin``, ``Label``, ``Codename``, ``Date``, ``Architectures`` ... and the
    multi-line ``SHA512`` field: one ``<sha512> <size> <name>`` line per index file. NVIDIA's flat
    repos list only SHA512 and only ``Packages`` and ``Packages.xz``.
``Packages``
    One paragraph per ``.deb``: ``Package``, ``Version``, ``Architecture``, ``Filename``
    (``./name_ver_arch.deb``), ``Size``, ``SHA256``, ``SHA512``, and the relationship fields
    ``Depends``, ``Pre-Depends``, ``Breaks``, ``Conflicts``, ``Replaces``, ``Provides``.

Main functions
--------------
:func:`parse_release`
    verified Release text -> :class:`ReleaseIndex` (fields plus ``files`` name -> :class:`FileDigest`).
:func:`parse_packages` / :func:`iter_packages`
    Packages text (or a stream of its lines) -> :class:`mirror.model.Package` records, with
    relationship fields turned into :class:`mirror.model.Relation` AND-of-OR groups.

Parsing is python-debian's ``debian.deb822`` with ``use_apt_pkg=False`` (so behaviour does not
depend on whether python3-apt happens to be importable). Never hand it unverified text:
``Deb822`` silently strips PGP armour, so an InRelease would "parse" without any check. Callers
verify first (:mod:`plumbing.gpg`) and pass only the verified text or checksum-verified bytes.

Specs
-----
* Debian repository format: https://wiki.debian.org/DebianRepository/Format
* deb822 / control files: https://www.debian.org/doc/debian-policy/ch-controlfields.html
* Relationship fields: https://www.debian.org/doc/debian-policy/ch-relationships.html
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from debian import deb822

from mirror.errors import MetadataError
from mirror.model import Package, PackageFormat, Relation, Relations

_SHA512_RE = re.compile(r"^[0-9a-f]{128}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
#: dpkg's long-deprecated '<' and '>' mean '<=' and '>='.
_DEB_OPS = {"<<": "<<", "<=": "<=", "=": "=", ">=": ">=", ">>": ">>", "<": "<=", ">": ">="}
#: Fields modelled on Package itself (or deliberately dropped); the rest is kept in Package.fields.
_MODELLED = frozenset(
    f.lower()
    for f in (
        "Package",
        "Version",
        "Architecture",
        "Filename",
        "Size",
        "SHA256",
        "SHA512",
        "Depends",
        "Pre-Depends",
        "Breaks",
        "Conflicts",
        "Replaces",
        "Provides",
        "MD5sum",
        "SHA1",  # weak digests: never used for verification, not worth 50,000 copies
    )
)


@dataclass(frozen=True)
class FileDigest:
    """Size and SHA512 of one index file, as the signed Release names it."""

    sha512: str
    size: int


@dataclass(frozen=True)
class ReleaseIndex:
    """The verified Release paragraph of one repository."""

    fields: dict[str, str]  #: every single-line field (Origin, Label, Codename, Date, ...)
    files: dict[str, FileDigest] = field(default_factory=dict)  #: from the SHA512 field, by name

    @property
    def architectures(self) -> list[str]:
        """The ``Architectures`` field split into names."""
        return self.fields.get("Architectures", "").split()


def parse_release(verified_text: str, what: str = "the signed Release") -> ReleaseIndex:
    """Parse the verified text of an InRelease (or a Release file checked against Release.gpg).

    :param verified_text: exactly the signed text :func:`plumbing.gpg.Keyring.verify_clearsigned` returned.
    :param what: how errors name the file, e.g. ``the signed <url>/InRelease``, so the operator knows which repo.
    :raises MetadataError: when the body is empty, has more than one paragraph, or lists no SHA512 files.

    Example::

        release = parse_release(keyring.verify_clearsigned(inrelease).text)
        release.files["Packages.xz"].size   # 28048
    """
    paragraphs = list(deb822.Release.iter_paragraphs(iter(verified_text.splitlines()), use_apt_pkg=False))
    if not paragraphs:
        raise MetadataError(what, "is empty; refusing to treat it as a repository with no packages")
    if len(paragraphs) > 1:
        raise MetadataError(what, f"has {len(paragraphs)} paragraphs instead of one")
    paragraph = paragraphs[0]
    fields = {key: value for key, value in paragraph.items() if isinstance(value, str) and "\n" not in value}
    files: dict[str, FileDigest] = {}
    problems: list[str] = []
    for entry in paragraph.get("SHA512", []):
        name, digest, size = entry.get("name", ""), entry.get("sha512", "").lower(), entry.get("size", "")
        if not name or not _SHA512_RE.match(digest) or not str(size).isdigit():
            problems.append(f"malformed SHA512 line for {name or '?'}")
        elif name in files:
            problems.append(f"{name} is listed twice")
        else:
            files[name] = FileDigest(digest, int(size))
    if problems:
        raise MetadataError(what, "; ".join(problems))
    if not files:
        raise MetadataError(what, "lists no SHA512 checksums, so no index can be verified")
    return ReleaseIndex(fields, files)


def parse_packages(text: str) -> list[Package]:
    """Parse a checksum-verified Packages index into packages, in file order.

    :param text: the whole Packages file.
    :raises MetadataError: when a paragraph lacks Package, Version, Architecture, Filename or Size.
    """
    return list(iter_packages(_iter_lines(text)))


def iter_packages(lines: Iterable[str], *, names: frozenset[str] | None = None) -> Iterator[Package]:
    """Stream packages from the lines of a Packages index (bounded memory for huge indexes).

    :param lines: the lines of the file, with or without line endings (a text file object works).
    :param names: parse only the paragraphs of these packages; the others are skipped by their
        ``Package:`` line alone (a CUDA repository lists thousands the toolkit never needs).
    :raises MetadataError: on a paragraph missing a required field or with a malformed size or digest.
    """
    shared = _Shared()
    source = iter(lines) if names is None else _paragraphs_named(lines, names)
    for paragraph in deb822.Packages.iter_paragraphs(source, use_apt_pkg=False):
        yield shared.package(paragraph)


def _paragraphs_named(lines: Iterable[str], names: frozenset[str]) -> Iterator[str]:
    """The lines of the paragraphs whose ``Package`` field is one of ``names`` (each followed by a blank line)."""
    paragraph: list[str] = []
    wanted = False
    for line in lines:
        if line.strip():
            paragraph.append(line)
            if line[:8].lower() == "package:":
                wanted = line[8:].strip() in names
            continue
        if paragraph and wanted:
            yield from paragraph
            yield "\n"
        paragraph, wanted = [], False
    if paragraph and wanted:
        yield from paragraph


def parse_relations(value: str) -> Relations:
    """Parse a deb relationship field (``a (>= 1), b | c``) into AND-of-OR :class:`Relation` groups."""
    return _Shared().relations(value)


class _Shared:
    """Per-parse caches so the thousands of identical values in an index share one object.

    A Packages file repeats the same Description, Maintainer and Depends lines for every version;
    sharing them (and parsing each distinct relationship line once) keeps 50,000 stanzas well
    under the 150 MB budget and roughly halves the parse time.
    """

    def __init__(self) -> None:
        self._relation_lines: dict[str, Relations] = {}
        self._relations: dict[tuple[str, str | None, str | None], Relation] = {}
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}

    def package(self, paragraph: deb822.Packages) -> Package:
        missing = [
            key
            for key in ("Package", "Version", "Architecture", "Filename", "Size")
            if not paragraph.get(key)
        ]
        name = paragraph.get("Package", "?")
        if missing:
            raise MetadataError(f"the Packages entry for {name}", f"lacks {', '.join(missing)}")
        size = paragraph["Size"]
        if not size.isdigit():
            raise MetadataError(f"the Packages entry for {name}", f"has a malformed Size {size!r}")
        sha256 = paragraph.get("SHA256")
        sha512 = paragraph.get("SHA512")
        if (sha256 and not _SHA256_RE.match(sha256)) or (sha512 and not _SHA512_RE.match(sha512)):
            raise MetadataError(f"the Packages entry for {name}", "has a malformed SHA256 or SHA512")
        return Package(
            format=PackageFormat.DEB,
            name=sys.intern(name),
            version=sys.intern(paragraph["Version"]),
            arch=sys.intern(paragraph["Architecture"]),
            filename=paragraph["Filename"],
            size=int(size),
            sha256=sha256,
            sha512=sha512,
            depends=self.relations(paragraph.get("Pre-Depends")) + self.relations(paragraph.get("Depends")),
            breaks=self.relations(paragraph.get("Breaks")),
            conflicts=self.relations(paragraph.get("Conflicts")),
            replaces=self.relations(paragraph.get("Replaces")),
            provides=tuple(rel for group in self.relations(paragraph.get("Provides")) for rel in group),
            fields=tuple(
                self._pair(key, value)
                for key, value in paragraph.items()
                if isinstance(value, str) and key.lower() not in _MODELLED
            ),
        )

    def relations(self, value: str | None) -> Relations:
        if not value:
            return ()
        parsed = self._relation_lines.get(value)
        if parsed is None:
            parsed = self._relation_lines[value] = self._convert(deb822.PkgRelation.parse_relations(value))
        return parsed

    def _convert(self, groups: Sequence[Sequence[Mapping[str, Any]]]) -> Relations:
        out = []
        for group in groups:
            alternatives = []
            for alt in group:
                version = alt.get("version")
                op, bound = (None, None)
                if isinstance(version, tuple):
                    op, bound = _DEB_OPS.get(str(version[0]), str(version[0])), str(version[1])
                key = (str(alt["name"]), op, bound)
                relation = self._relations.get(key)
                if relation is None:
                    relation = self._relations[key] = Relation(sys.intern(key[0]), op, bound)
                alternatives.append(relation)
            if alternatives:
                out.append(tuple(alternatives))
        return tuple(out)

    def _pair(self, key: str, value: str) -> tuple[str, str]:
        pair = (key, value)
        return self._pairs.setdefault(pair, pair)


def _iter_lines(text: str) -> Iterator[str]:
    # str.splitlines() would hold every line of a 50 MB index at once; walk it lazily instead.
    start = 0
    length = len(text)
    while start < length:
        end = text.find("\n", start)
        if end < 0:
            yield text[start:]
            return
        yield text[start : end + 1]
        start = end + 1
