"""Signed apt flat repos and yum repos for a set of mirror packages, made with the real tools.

Shared by the bundle (:mod:`mirror.bundle.target_repo`, one release per target) and ``mirror publish``
(:mod:`mirror.publish.tree`, everything a repo holds):

- deb: ``Packages``, ``Packages.xz`` and a clearsigned ``InRelease`` (SHA256 and SHA512 of both
  indexes). Stanzas come from each package's own control data (:mod:`mirror.index.header`), so the
  index describes exactly the files shipped.
- rpm: ``repodata/`` made by ``createrepo_c`` (no sqlite, gzip, fixed revision and timestamps)
  plus the armored detached ``repodata/repomd.xml.asc``.

Everything is returned as ``{relative path: bytes}``; callers decide where it goes.

:func:`package_headers` reads each package's own header - only after its bytes matched the digest
the mirror recorded from signed metadata - and, when the package carries its signed index entry
(a bundle build), refuses one that disagrees with it. Headers are cached under the recorded
digest, so a later build neither re-reads nor re-hashes a package before streaming it (that
stream is checked against the same digest).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from mirror.errors import PackageChangedError
from mirror.index.header import PackageHeader, check_agrees, read_header
from mirror.model import SourcePackage
from mirror.signing.key import OperatorKey
from plumbing.errors import ToolError
from plumbing.fsutil import atomic_write
from plumbing.proc import run


@dataclass(frozen=True)
class ReleaseLabels:
    """The descriptive fields of a generated InRelease."""

    origin: str
    label: str
    description: str


@dataclass(frozen=True)
class AptEntry:
    """One package of an apt index: the file, its verified sha256 and its control fields."""

    source: SourcePackage
    sha256: str
    control: Sequence[tuple[str, str]]


@dataclass(frozen=True)
class HeaderFacts:
    """A package's own header and the sha256 of the verified bytes it was read from."""

    sha256: str
    header: PackageHeader


def package_headers(
    fmt: str, packages: Sequence[SourcePackage], info_cache: Path | None, *, verified: bool = False
) -> list[HeaderFacts]:
    """Each package's header (and sha256), in ``packages`` order, checked against its signed entry when it has one.

    :param info_cache: where answers are kept under each package's recorded digest (None: read every time).
    :param verified: the caller has just checked every file against its recorded digest (publish
        places and hashes them first); otherwise each file not in the cache is hashed before it is read.
    :raises PackageChangedError: when a file no longer matches its recorded digest.
    :raises HeaderMismatch: when a package's header disagrees with its signed index entry.
    """
    with ThreadPoolExecutor(max_workers=4) as pool:
        facts = list(pool.map(lambda pkg: _cached_facts(fmt, pkg, info_cache, verified), packages))
    for pkg, fact in zip(packages, facts):
        if pkg.entry is not None:
            check_agrees(fact.header, pkg.entry, what=str(pkg.path))
    return facts


def apt_metadata(
    entries: Sequence[AptEntry],
    *,
    arch: str,
    key: OperatorKey,
    epoch: int,
    channel: str,
    labels: ReleaseLabels,
) -> dict[str, bytes]:
    """``Packages``, ``Packages.xz`` and ``InRelease`` (signed at ``epoch``) of a flat repo holding ``entries``."""
    stanzas = []
    for entry in sorted(entries, key=lambda e: (e.source.name, e.source.version, e.source.path.name)):
        fields = [
            (k, v)
            for k, v in entry.control
            if k.lower() not in ("filename", "size", "md5sum", "sha1", "sha256", "sha512")
        ]
        fields += [
            ("Filename", f"./{entry.source.path.name}"),
            ("Size", str(entry.source.size)),
            ("SHA256", entry.sha256),
        ]
        if entry.source.sha512:
            fields.append(("SHA512", entry.source.sha512))
        stanzas.append("".join(f"{k}: {v}\n" for k, v in fields))
    packages_bytes = "\n".join(stanzas).encode("utf-8") + b"\n"
    packages_xz = lzma.compress(packages_bytes, format=lzma.FORMAT_XZ, preset=6)
    date = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%a, %d %b %Y %H:%M:%S +0000")
    lines = [
        f"Origin: {labels.origin}",
        f"Label: {labels.label}",
        f"Codename: {channel}",
        f"Date: {date}",
        f"Architectures: {arch}",
        "Components: main",
        f"Description: {labels.description}",
    ]
    for algo in ("SHA256", "SHA512"):
        lines.append(f"{algo}:")
        for name, data in (("Packages", packages_bytes), ("Packages.xz", packages_xz)):
            lines.append(f" {hashlib.new(algo.lower(), data).hexdigest()} {len(data):>16} {name}")
    release = ("\n".join(lines) + "\n").encode("utf-8")
    return {
        "Packages": packages_bytes,
        "Packages.xz": packages_xz,
        "InRelease": key.clearsign(release, at=epoch),
    }


def yum_metadata(files: Sequence[Path], *, key: OperatorKey, epoch: int) -> dict[str, bytes]:
    """``repodata/*`` (createrepo_c, revision and timestamps ``epoch``) and ``repomd.xml.asc`` for the rpm ``files``."""
    with tempfile.TemporaryDirectory(prefix="gpu-airgap-yum-") as tmp:
        work = Path(tmp)
        for path in files:
            # createrepo_c follows symlinks: the metadata describes the mirror's files without copying them.
            (work / path.name).symlink_to(path)
        run(
            [
                "createrepo_c",
                "--quiet",
                "--no-database",
                "--workers",
                "1",
                "--revision",
                str(epoch),
                "--set-timestamp-to-revision",
                "--general-compress-type",
                "gz",
                str(work),
            ],
            timeout=600,
        )
        out = {f"repodata/{p.name}": p.read_bytes() for p in sorted((work / "repodata").iterdir())}
    out["repodata/repomd.xml.asc"] = key.sign_detached(out["repodata/repomd.xml"], at=epoch)
    return out


def _cached_facts(fmt: str, pkg: SourcePackage, cache: Path | None, verified: bool) -> HeaderFacts:
    """:func:`_read_facts`, remembered under the package's recorded digest.

    The answer is a pure function of the package's bytes, and callers check those bytes against
    the same recorded digest while they copy or stream them (a mismatch aborts), so a cached
    answer always describes the file shipped.
    """
    digest = f"sha256-{pkg.sha256}" if pkg.sha256 else f"sha512-{pkg.sha512}" if pkg.sha512 else None
    if digest is None:
        raise ToolError(f"the mirror recorded no checksum for {pkg.path}; sync the mirror again")
    entry = cache / f"{fmt}-{digest}.json" if cache is not None else None
    if entry is not None:
        try:
            data = json.loads(entry.read_bytes())
            if data.get("v") == _CACHE_VERSION:
                return HeaderFacts(str(data["sha256"]), PackageHeader.from_json(data["header"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # absent, unreadable or from an older version: read the package
    facts = _read_facts(fmt, pkg, verified)
    if entry is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
            entry.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(
                entry,
                json.dumps(
                    {"v": _CACHE_VERSION, "sha256": facts.sha256, "header": facts.header.to_json()}
                ).encode(),
            )
    return facts


_CACHE_VERSION = 3  # 3: rpm headers carry file_digest_algo


def _read_facts(fmt: str, pkg: SourcePackage, verified: bool) -> HeaderFacts:
    """Check the file against its recorded digest (unless the caller just did), then read its header."""
    sha256 = pkg.sha256 if verified and pkg.sha256 else _checked_sha256(pkg)
    return HeaderFacts(sha256, read_header(pkg.path, fmt, what=str(pkg.path)))


def _checked_sha256(pkg: SourcePackage) -> str:
    """One pass over the file: its sha256, after its recorded sha256 or sha512 matched.

    :raises PackageChangedError: on a mismatch.
    """
    sha256, sha512 = hashlib.sha256(), hashlib.sha512()
    with open(pkg.path, "rb") as fh:
        while block := fh.read(1 << 20):
            sha256.update(block)
            if not pkg.sha256:
                sha512.update(block)
    for algo, recorded, actual in (
        ("sha256", pkg.sha256, sha256),
        ("sha512", pkg.sha512 if not pkg.sha256 else None, sha512),
    ):
        if recorded and recorded != actual.hexdigest():
            raise PackageChangedError(pkg.path, f"{algo} {recorded[:16]}…", f"{actual.hexdigest()[:16]}…")
    return sha256.hexdigest()
