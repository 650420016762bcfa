"""Read yum/dnf repository metadata: ``repodata/repomd.xml`` and the ``primary`` index.

Formats
-------
``repomd.xml``
    The signed root (``repomd.xml.asc`` is its detached signature). One ``<data type="...">`` per
    index with ``<checksum type=...>`` (of the file as stored, usually compressed),
    ``<open-checksum>`` (of the uncompressed XML), ``<location href=...>``, ``<size>``,
    ``<open-size>`` and ``<timestamp>``.
``primary.xml[.gz|.xz|.zst]``
    One ``<package type="rpm">`` per rpm: ``name``, ``arch``, ``version epoch= ver= rel=``,
    ``checksum type=``, ``size package=``, ``location href=``, and under ``format`` the
    ``rpm:provides|requires|conflicts|obsoletes`` entry lists (``flags`` EQ/GE/LE/LT/GT).

:func:`iter_primary` parses primary as a stream (``xml.etree.ElementTree.iterparse``, clearing
each finished package), so memory stays bounded however large the repository is.
``rpmlib(...)`` requires are dropped (rpm itself satisfies them); file requires (``/bin/sh``) and
rich dependencies (``(a or b)``) are kept raw and become node requirements in resolution.

Spec: https://github.com/rpm-software-management/createrepo_c/blob/master/doc/createrepo_c.8 and
the createrepo_c ``xml_dump_primary.c`` writer; flags: rpm's ``rpmsenseFlags``.
"""

from __future__ import annotations

import gzip
import io
import lzma
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

import zstandard

from mirror.errors import MetadataError
from mirror.model import Package, PackageFormat, Relation

_REPO_NS = "{http://linux.duke.edu/metadata/repo}"
_COMMON_NS = "{http://linux.duke.edu/metadata/common}"
_RPM_NS = "{http://linux.duke.edu/metadata/rpm}"
_FLAGS = {"EQ": "=", "GE": ">=", "LE": "<=", "LT": "<<", "GT": ">>"}
_DIGESTS = ("sha256", "sha512")


@dataclass(frozen=True)
class RepomdData:
    """One index file named by repomd.xml."""

    type: str  #: "primary", "filelists", "other", ...
    href: str  #: relative to the repository base: ``repodata/<digest>-primary.xml.gz``
    checksum_type: str  #: "sha256" or "sha512" (as in the file; "sha" means sha1)
    checksum: str  #: digest of the file as stored
    size: int | None
    open_checksum_type: str | None
    open_checksum: str | None  #: digest of the uncompressed content
    open_size: int | None
    timestamp: int | None


@dataclass(frozen=True)
class Repomd:
    """The signed root of a yum repository."""

    revision: str | None
    data: dict[str, RepomdData]  #: by type


def parse_repomd(data: bytes) -> Repomd:
    """Parse the bytes of a verified ``repomd.xml``.

    :raises MetadataError: when it is not repomd XML or an entry lacks its location or checksum.
    """
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise MetadataError("repomd.xml", f"is not well-formed XML ({exc})") from exc
    if root.tag != f"{_REPO_NS}repomd":
        raise MetadataError("repomd.xml", f"has root element {root.tag!r}, not repomd")
    entries: dict[str, RepomdData] = {}
    for node in root.findall(f"{_REPO_NS}data"):
        kind = node.get("type", "")
        location = node.find(f"{_REPO_NS}location")
        checksum = node.find(f"{_REPO_NS}checksum")
        if not kind or location is None or not location.get("href") or checksum is None or not checksum.text:
            raise MetadataError("repomd.xml", f"has a data entry {kind!r} without location or checksum")
        open_checksum = node.find(f"{_REPO_NS}open-checksum")
        entries[kind] = RepomdData(
            type=kind,
            href=location.get("href", ""),
            checksum_type=checksum.get("type", ""),
            checksum=checksum.text.strip().lower(),
            size=_int_text(node, "size"),
            open_checksum_type=open_checksum.get("type") if open_checksum is not None else None,
            open_checksum=(open_checksum.text or "").strip().lower() if open_checksum is not None else None,
            open_size=_int_text(node, "open-size"),
            timestamp=_int_text(node, "timestamp"),
        )
    if not entries:
        raise MetadataError("repomd.xml", "names no metadata files")
    revision = root.findtext(f"{_REPO_NS}revision")
    return Repomd(revision.strip() if revision else None, entries)


def open_decompressed(stream: IO[bytes]) -> IO[bytes]:
    """Wrap ``stream`` in the decompressor its magic bytes call for (gzip, xz, zstd or none)."""
    buffered = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(cast(Any, stream))
    magic = buffered.peek(6)[:6]
    if magic[:2] == b"\x1f\x8b":
        return cast(IO[bytes], gzip.GzipFile(fileobj=buffered))
    if magic == b"\xfd7zXZ\x00":
        return cast(IO[bytes], lzma.LZMAFile(buffered))
    if magic[:4] == b"\x28\xb5\x2f\xfd":
        return cast(IO[bytes], zstandard.ZstdDecompressor().stream_reader(buffered))
    return cast(IO[bytes], buffered)


def iter_primary(stream: IO[bytes]) -> Iterator[Package]:
    """Stream packages from primary.xml, compressed or not, in bounded memory.

    :param stream: a binary file object (``open(path, "rb")`` or ``io.BytesIO``).
    :raises MetadataError: on malformed XML or a package without name, version, location or checksum.
    """
    context = ET.iterparse(open_decompressed(stream), events=("start", "end"))
    try:
        _, root = next(context)
        if root.tag != f"{_COMMON_NS}metadata":
            raise MetadataError("primary.xml", f"has root element {root.tag!r}, not metadata")
        for event, element in context:
            if event == "end" and element.tag == f"{_COMMON_NS}package":
                if element.get("type", "rpm") == "rpm":
                    yield _to_package(element)
                root.clear()  # drop finished packages: bounded memory
    except ET.ParseError as exc:
        raise MetadataError("primary.xml", f"is not well-formed XML ({exc})") from exc
    except (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError) as exc:
        raise MetadataError("primary.xml", f"cannot be decompressed ({exc})") from exc


def _to_package(element: ET.Element) -> Package:
    name = element.findtext(f"{_COMMON_NS}name") or ""
    version = element.find(f"{_COMMON_NS}version")
    location = element.find(f"{_COMMON_NS}location")
    checksum = element.find(f"{_COMMON_NS}checksum")
    size = element.find(f"{_COMMON_NS}size")
    arch = element.findtext(f"{_COMMON_NS}arch") or ""
    what = f"the primary.xml entry for {name or '?'}"
    if not name or version is None or not version.get("ver") or location is None or not location.get("href"):
        raise MetadataError(what, "lacks name, version, location or checksum")
    if checksum is None:
        raise MetadataError(what, "lacks name, version, location or checksum")
    digest_type = checksum.get("type", "")
    if digest_type not in _DIGESTS:
        raise MetadataError(what, f"uses checksum type {digest_type!r}; only sha256 and sha512 are accepted")
    package_size = size.get("package", "") if size is not None else ""
    if not package_size.isdigit():
        raise MetadataError(what, "lacks a valid package size")
    digest = (checksum.text or "").strip().lower()
    fmt = element.find(f"{_COMMON_NS}format")
    return Package(
        format=PackageFormat.RPM,
        name=sys.intern(name),
        version=sys.intern(_evr(version.get("epoch"), version.get("ver"), version.get("rel")) or ""),
        arch=sys.intern(arch),
        filename=location.get("href", ""),
        size=int(package_size),
        sha256=digest if digest_type == "sha256" else None,
        sha512=digest if digest_type == "sha512" else None,
        depends=tuple((rel,) for rel in _entries(fmt, "requires")),
        conflicts=tuple((rel,) for rel in _entries(fmt, "conflicts")),
        replaces=tuple((rel,) for rel in _entries(fmt, "obsoletes")),
        provides=tuple(_entries(fmt, "provides")),
        fields=_fields(element, fmt),
    )


def _entries(fmt: ET.Element | None, kind: str) -> list[Relation]:
    if fmt is None:
        return []
    node = fmt.find(f"{_RPM_NS}{kind}")
    if node is None:
        return []
    out: list[Relation] = []
    for entry in node.findall(f"{_RPM_NS}entry"):
        name = entry.get("name", "")
        if not name or name.startswith("rpmlib("):
            continue  # rpm satisfies rpmlib() features itself
        if name.startswith("(") or name.startswith("/"):
            out.append(Relation(name, raw=name))  # rich or file dependency: kept verbatim
            continue
        flags = entry.get("flags")
        version = _evr(entry.get("epoch"), entry.get("ver"), entry.get("rel"))
        op = _FLAGS.get(flags or "")
        out.append(Relation(sys.intern(name), op if version else None, version if op else None))
    return out


def _evr(epoch: str | None, ver: str | None, rel: str | None) -> str | None:
    if not ver:
        return None
    text = ver if not rel else f"{ver}-{rel}"
    return f"{epoch}:{text}" if epoch and epoch != "0" else text


def _fields(element: ET.Element, fmt: ET.Element | None) -> tuple[tuple[str, str], ...]:
    out = [
        (tag, (element.findtext(f"{_COMMON_NS}{tag}") or "").strip())
        for tag in ("summary", "url", "packager")
    ]
    if fmt is not None:
        for tag in ("license", "vendor", "group", "sourcerpm"):
            value = fmt.findtext(f"{_RPM_NS}{tag}")
            if value:
                out.append((tag, value.strip()))
    return tuple((k, v) for k, v in out if v)


def _int_text(node: ET.Element, tag: str) -> int | None:
    text = node.findtext(f"{_REPO_NS}{tag}")
    return int(text) if text and text.strip().isdigit() else None
