"""The ready local repository each bundle target carries, signed by the operator key.

- deb: an apt flat repo — the ``.deb`` files beside ``Packages``, ``Packages.xz`` and a
  clearsigned ``InRelease`` (SHA256 and SHA512 of both indexes), usable as
  ``deb [signed-by=operator.gpg] file:/…/targets/deb-amd64 ./``.
- rpm: a yum repo — the ``.rpm`` files plus ``repodata/`` made by the ``createrepo_c`` command
  (no sqlite, gzip, fixed revision and timestamps) and ``repodata/repomd.xml.asc``.

Package stanzas come from each package's own control data (``dpkg-deb -f`` / ``rpm -qp``), so the
repo describes exactly the files shipped. Only small metadata is produced in memory; package
files are streamed into the archive later by the builder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from configure.errors import CommandError, ToolError
from configure.fsutil import atomic_write
from configure.proc import run
from mirror.bundle_sign import OperatorKey
from mirror.bundle_source import SourcePackage, TargetSelection
from mirror.bundle_tar import PackageChangedError
from mirror.node_zipapp import default_cache
from mirror.store import file_digest


@dataclass(frozen=True)
class RepoPackage:
    """A package placed in a target repo, with the facts the manifest needs."""

    source: SourcePackage
    member: str  #: archive path, ``targets/deb-amd64/<file>``
    sha256: str
    depends: tuple[str, ...]


@dataclass(frozen=True)
class TargetRepo:
    """A target's packages (install order) and its generated metadata members (path -> bytes)."""

    selection: TargetSelection
    repo_dir: str
    packages: tuple[RepoPackage, ...]
    metadata: dict[str, bytes]


def build_target_repo(
    selection: TargetSelection, *, key: OperatorKey, epoch: int, channel: str, info_cache: Path | None = None
) -> TargetRepo:
    """Generate the signed repo metadata of one target.

    :param selection: the target's packages from the mirror.
    :param key: the operator key that signs ``InRelease`` / ``repomd.xml``.
    :param epoch: the build time (SOURCE_DATE_EPOCH or now) used for dates and signatures.
    :param channel: written as the apt ``Codename``.
    :param info_cache: where each package's control data / requires is kept, under its recorded
        digest, so a later build skips the dpkg-deb / rpm query (None: query every time).
    """
    repo_dir = f"targets/{selection.format}-{selection.arch}"
    # Each query is a dpkg-deb / rpm process: running them side by side hides their start-up time.
    with ThreadPoolExecutor(max_workers=4) as pool:
        queried = list(pool.map(lambda pkg: _cached_query(selection.format, pkg, info_cache), selection.packages))
    control = {pkg.path: fields for pkg, (fields, _) in zip(selection.packages, queried)}
    packages = tuple(
        RepoPackage(pkg, f"{repo_dir}/{pkg.path.name}", _recorded_sha256(pkg), depends)
        for pkg, (_, depends) in zip(selection.packages, queried)
    )
    if selection.format == "deb":
        metadata = _apt_metadata(packages, control, arch=selection.arch, key=key, epoch=epoch, channel=channel)
    else:
        metadata = _yum_metadata(packages, key=key, epoch=epoch)
    return TargetRepo(selection, repo_dir, packages, {f"{repo_dir}/{k}": v for k, v in metadata.items()})


def _recorded_sha256(pkg: SourcePackage) -> str:
    """The sha256 the mirror recorded from signed metadata; the builder checks the shipped bytes against it.

    A package the upstream metadata vouched for by sha512 alone is hashed once here, and its
    sha512 checked, so the sha256 the manifest names is one of verified bytes too.

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


def default_info_cache() -> Path:
    """``package-info/`` beside the node wheel cache (``~/.cache/gpu-airgap/package-info``)."""
    return default_cache().parent / "package-info"


def _cached_query(
    fmt: str, pkg: SourcePackage, cache: Path | None
) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """:func:`_query_package`, remembered under the package's recorded digest.

    The answer is a pure function of the package's bytes, and those bytes are checked against
    the same recorded digest while they stream into the bundle (a mismatch aborts the build), so
    a cached answer always describes the file shipped.
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


def _query_package(fmt: str, pkg: SourcePackage) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
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


def _apt_metadata(
    packages: tuple[RepoPackage, ...], control: dict[Path, list[tuple[str, str]]], *, arch: str, key: OperatorKey, epoch: int, channel: str
) -> dict[str, bytes]:
    stanzas = []
    for pkg in sorted(packages, key=lambda p: (p.source.name, p.source.version, p.member)):
        fields = [
            (k, v)
            for k, v in control[pkg.source.path]
            if k.lower() not in ("filename", "size", "md5sum", "sha1", "sha256", "sha512")
        ]
        fields += [("Filename", f"./{pkg.source.path.name}"), ("Size", str(pkg.source.size)), ("SHA256", pkg.sha256)]
        if pkg.source.sha512:
            fields.append(("SHA512", pkg.source.sha512))
        stanzas.append("".join(f"{k}: {v}\n" for k, v in fields))
    packages_bytes = "\n".join(stanzas).encode("utf-8") + b"\n"
    packages_xz = lzma.compress(packages_bytes, format=lzma.FORMAT_XZ, preset=6)
    date = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%a, %d %b %Y %H:%M:%S +0000")
    lines = [
        "Origin: gpu-airgap",
        "Label: gpu-airgap offline bundle",
        f"Codename: {channel}",
        f"Date: {date}",
        f"Architectures: {arch}",
        "Components: main",
        "Description: NVIDIA Container Toolkit packages re-signed by the bundle operator",
    ]
    for algo in ("SHA256", "SHA512"):
        lines.append(f"{algo}:")
        for name, data in (("Packages", packages_bytes), ("Packages.xz", packages_xz)):
            lines.append(f" {hashlib.new(algo.lower(), data).hexdigest()} {len(data):>16} {name}")
    release = ("\n".join(lines) + "\n").encode("utf-8")
    return {"Packages": packages_bytes, "Packages.xz": packages_xz, "InRelease": key.clearsign(release, at=epoch)}


def _yum_metadata(packages: tuple[RepoPackage, ...], *, key: OperatorKey, epoch: int) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="gpu-airgap-yum-") as tmp:
        work = Path(tmp)
        for pkg in packages:
            # createrepo_c follows symlinks: the metadata describes the mirror's files without copying them.
            (work / pkg.source.path.name).symlink_to(pkg.source.path)
        run(
            [
                "createrepo_c", "--quiet", "--no-database", "--workers", "1",
                "--revision", str(epoch), "--set-timestamp-to-revision",
                "--general-compress-type", "gz", str(work),
            ],
            timeout=600,
        )
        out = {f"repodata/{p.name}": p.read_bytes() for p in sorted((work / "repodata").iterdir())}
    out["repodata/repomd.xml.asc"] = key.sign_detached(out["repodata/repomd.xml"], at=epoch)
    return out
