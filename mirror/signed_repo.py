"""Signed apt flat repos and yum repos for a set of mirror packages, made with the real tools.

Shared by the bundle (:mod:`mirror.bundle.target_repo`, one release per target) and ``mirror publish``
(:mod:`mirror.publish.tree`, everything a repo holds):

- deb: ``Packages``, ``Packages.xz`` and a clearsigned ``InRelease`` (SHA256 and SHA512 of both
  indexes). Stanzas come from each package's own control data (``dpkg-deb -f``), so the index
  describes exactly the files shipped.
- rpm: ``repodata/`` made by ``createrepo_c`` (no sqlite, gzip, fixed revision and timestamps)
  plus the armored detached ``repodata/repomd.xml.asc``.

Everything is returned as ``{relative path: bytes}``; callers decide where it goes.
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
from mirror.model import SourcePackage
from mirror.signing import OperatorKey
from mirror.store import file_digest
from plumbing.errors import CommandError, ToolError
from plumbing.fsutil import atomic_write
from plumbing.proc import run

#: (control fields in order, depends) of one package; rpm packages have no control fields here.
PackageFacts = tuple[list[tuple[str, str]], tuple[str, ...]]


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
    control: list[tuple[str, str]]


def recorded_sha256(pkg: SourcePackage) -> str:
    """The sha256 the mirror recorded from signed metadata; callers check the shipped bytes against it.

    A package the upstream metadata vouched for by sha512 alone is hashed once here, and its
    sha512 checked, so the sha256 an index names is one of verified bytes too.

    :raises PackageChangedError: when such a file no longer matches its recorded sha512.
    """
    if pkg.sha256:
        return pkg.sha256
    if not pkg.sha512:
        raise ToolError(f"the mirror recorded no checksum for {pkg.path}; sync the mirror again")
    sha256, sha512 = hashlib.sha256(), hashlib.sha512()
    with open(pkg.path, "rb") as fh:
        while block := fh.read(1 << 20):
            sha256.update(block)
            sha512.update(block)
    if pkg.sha512 != sha512.hexdigest():
        raise PackageChangedError(pkg.path, f"sha512 {pkg.sha512[:16]}…", f"{sha512.hexdigest()[:16]}…")
    return sha256.hexdigest()


def query_packages(fmt: str, packages: Sequence[SourcePackage], info_cache: Path | None) -> list[PackageFacts]:
    """Each package's control fields and depends (deb) or requires (rpm), in ``packages`` order.

    :param info_cache: where answers are kept under each package's recorded digest, so a later
        run skips the dpkg-deb / rpm query (None: query every time).
    """
    # Each query is a dpkg-deb / rpm process: running them side by side hides their start-up time.
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda pkg: _cached_query(fmt, pkg, info_cache), packages))


def apt_metadata(
    entries: Sequence[AptEntry], *, arch: str, key: OperatorKey, epoch: int, channel: str, labels: ReleaseLabels
) -> dict[str, bytes]:
    """``Packages``, ``Packages.xz`` and ``InRelease`` (signed at ``epoch``) of a flat repo holding ``entries``."""
    stanzas = []
    for entry in sorted(entries, key=lambda e: (e.source.name, e.source.version, e.source.path.name)):
        fields = [
            (k, v) for k, v in entry.control if k.lower() not in ("filename", "size", "md5sum", "sha1", "sha256", "sha512")
        ]
        fields += [("Filename", f"./{entry.source.path.name}"), ("Size", str(entry.source.size)), ("SHA256", entry.sha256)]
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
    return {"Packages": packages_bytes, "Packages.xz": packages_xz, "InRelease": key.clearsign(release, at=epoch)}


def yum_metadata(files: Sequence[Path], *, key: OperatorKey, epoch: int) -> dict[str, bytes]:
    """``repodata/*`` (createrepo_c, revision and timestamps ``epoch``) and ``repomd.xml.asc`` for the rpm ``files``."""
    with tempfile.TemporaryDirectory(prefix="gpu-airgap-yum-") as tmp:
        work = Path(tmp)
        for path in files:
            # createrepo_c follows symlinks: the metadata describes the mirror's files without copying them.
            (work / path.name).symlink_to(path)
        run(
            [
                "createrepo_c", "--quiet", "--no-database", "--workers", "1",
                "--revision", str(epoch), "--set-timestamp-to-revision",
                "--general-compress-type", "gz", str(work),
            ],
            timeout=600,
        )  # fmt: skip
        out = {f"repodata/{p.name}": p.read_bytes() for p in sorted((work / "repodata").iterdir())}
    out["repodata/repomd.xml.asc"] = key.sign_detached(out["repodata/repomd.xml"], at=epoch)
    return out


def _query(pkg: SourcePackage, argv: list[str]) -> str:
    """Run a package query on ``pkg``; when it fails because the file changed since sync, say so."""
    try:
        return run([*argv, str(pkg.path)]).stdout.decode("utf-8")
    except CommandError as exc:
        algo, recorded = ("sha256", pkg.sha256) if pkg.sha256 else ("sha512", pkg.sha512)
        actual = file_digest(pkg.path, algo)
        if recorded and recorded != actual:
            raise PackageChangedError(pkg.path, f"{algo} {recorded[:16]}…", f"{actual[:16]}…") from exc
        raise


def _cached_query(fmt: str, pkg: SourcePackage, cache: Path | None) -> PackageFacts:
    """:func:`_query_package`, remembered under the package's recorded digest.

    The answer is a pure function of the package's bytes, and callers check those bytes against
    the same recorded digest while they copy or stream them (a mismatch aborts), so a cached
    answer always describes the file shipped.
    """
    digest = f"sha256-{pkg.sha256}" if pkg.sha256 else f"sha512-{pkg.sha512}" if pkg.sha512 else None
    entry = cache / f"{fmt}-{digest}.json" if cache is not None and digest else None
    if entry is not None:
        try:
            data = json.loads(entry.read_bytes())
            return [(str(k), str(v)) for k, v in data["fields"]], tuple(str(d) for d in data["depends"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # absent or unreadable: ask the package
    fields, depends = _query_package(fmt, pkg)
    if entry is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
            entry.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(entry, json.dumps({"fields": fields, "depends": depends}).encode())
    return fields, depends


def _query_package(fmt: str, pkg: SourcePackage) -> PackageFacts:
    """(control fields, depends) of a .deb — one dpkg-deb call serves both — or ([], requires) of an .rpm."""
    if fmt == "deb":
        fields = _control_fields(_query(pkg, ["dpkg-deb", "-f"]))
        return fields, _deb_depends(fields)
    return [], _rpm_requires(pkg)


def _deb_depends(fields: list[tuple[str, str]]) -> tuple[str, ...]:
    value = " ".join(v for k, v in fields if k.lower() == "pre-depends") + ", " + " ".join(
        v for k, v in fields if k.lower() == "depends"
    )
    return tuple(d.strip() for d in value.replace("\n", " ").split(",") if d.strip())


def _rpm_requires(pkg: SourcePackage) -> tuple[str, ...]:
    out = _query(pkg, ["rpm", "-qp", "--nosignature", "--requires"])
    return tuple(line.strip() for line in out.splitlines() if line.strip() and not line.startswith("rpmlib("))


def _control_fields(text: str) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and fields:
            fields[-1] = (fields[-1][0], fields[-1][1] + "\n" + line)
        elif ":" in line:
            name, _, value = line.partition(":")
            fields.append((name, value.strip()))
    return fields
