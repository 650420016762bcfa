"""Build one signed offline bundle from a mirror: ``gpu-airgap bundle build``.

The bundle is a deterministic tar stream (:mod:`mirror.bundle.tar`) whose members are, in order:
``manifest.json``, ``manifest.json.asc`` (the operator's detached signature), the node check
(:mod:`installer.nodecheck`: ``NODE-SHA256SUMS``, its signature ``NODE-SHA256SUMS.asc``,
``install.sh``, ``gpu-airgap-node.pyz``; first, so a node takes them out without reading the rest,
and in the first part of a split bundle), then sorted: ``operator-key.asc``, ``sbom.spdx.json``
and, per target, ``targets/<format>-<arch>/`` with the packages and their signed local repo metadata.

The manifest is computed before any byte is written: package digests come from the mirror's
verified metadata and are re-checked while the files stream into the archive (a package that
changed on disk aborts the build and leaves no output). Generated files are small and hashed in
memory. Two builds with the same SOURCE_DATE_EPOCH are byte-identical except for
``manifest.json.asc`` (and, with ``--split``, the checksum list's signature): ``NODE-SHA256SUMS.asc``
is made at SOURCE_DATE_EPOCH, like the embedded repositories' signatures, and so is identical too.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from installer.fips import build_warning
from installer.freshness import format_time, utc_now
from installer.manifest import (
    MANIFEST_NAME,
    SIGNATURE_NAME,
    FileEntry,
    Manifest,
    PackageEntry,
    TargetEntry,
)
from installer.nodecheck import HEAD, INSTALL_SH, NODE_SUMS, NODE_SUMS_SIGNATURE, NODE_TOOL, render_sums
from mirror.bundle.sbom import SBOM_NAME, SbomPackage, render_spdx
from mirror.bundle.source import MirrorSelection, select_from_mirror, upstream_version
from mirror.bundle.split_head import check_first_part, head_size
from mirror.bundle.tar import BundleWriter
from mirror.bundle.target_repo import TargetRepo, build_target_repo
from mirror.bundle.zipapp import ZIP_EPOCH, Wheel, build_zipapp
from mirror.disk.store import file_digest, reading
from mirror.hostenv import build_epoch, package_info_cache
from mirror.release.lockfile import Lockfile
from mirror.signing.key import SigningKeys
from plumbing.errors import NoSpaceError, ToolError, UsageError
from plumbing.progress import Meter, NoMeter
from plumbing.version import VERSION

OPERATOR_KEY = "operator-key.asc"
_INSTALL_SH_SOURCE = Path(__file__).parent / "data" / "install.sh"
#: The zipapp's entry timestamp: fixed (1980-01-01, the zip format's first date) rather than the
#: build time, so the zipapp is a pure function of the sources and wheels and its cached copy is
#: reused by every build instead of being re-deflated (~0.4 s) whenever the clock moved.
PYZ_EPOCH = ZIP_EPOCH


@dataclass(frozen=True)
class BuildResult:
    """What a build produced."""

    outputs: tuple[Path, ...]  #: the bundle (or its parts, checksum list and its signature)
    manifest: Manifest
    members: int
    payload_bytes: int  #: uncompressed size of all members


#: the file name endings a bundle's compression implies (``tar -xf`` and people read the name)
SUFFIXES = (
    (".tar.zst", "zstd"),
    (".tzst", "zstd"),
    (".tar.xz", "xz"),
    (".txz", "xz"),
    (".tar.gz", "gzip"),
    (".tgz", "gzip"),
    (".tar", "none"),
)


def compression_for(output: Path, compression: str | None) -> str:
    """The compression to write ``output`` with: ``compression``, else what its name implies, else zstd.

    :raises UsageError: when ``compression`` and the name disagree (an ``.tar.zst`` file of xz).
    """
    implied = next((name for suffix, name in SUFFIXES if output.name.endswith(suffix)), None)
    if compression is None:
        return implied or "zstd"
    if implied is not None and implied != compression:
        raise UsageError(
            f"--compression {compression} does not match the output name {output.name}, which says {implied}; "
            "rename the output or leave out --compression"
        )
    return compression


def parse_size(text: str) -> int:
    """``650M`` / ``4G`` / ``1048576`` -> bytes (binary units)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        if value and value[-1] in units:
            return int(float(value[:-1]) * units[value[-1]])
        return int(value)
    except (ValueError, OverflowError):  # OverflowError: "infM", "1e999G"
        raise UsageError(f"--split {text!r} is not a size like 650M or 4G") from None


def build_bundle(
    mirror: Path,
    *,
    version: str,
    channel: str | None,
    targets: list[tuple[str, str]],
    sign_key: str | Sequence[str],
    gnupghome: Path | None,
    output: Path,
    compression: str = "zstd",
    split: int | None = None,
    node_wheels: Sequence[Wheel] | None = None,
    locked: Lockfile | None = None,
    epoch: int | None = None,
    info_cache: Path | None = None,
    meter: Meter | None = None,
    expires: timedelta | None = None,
) -> BuildResult:
    """Select ``version`` for ``targets`` from the mirror at ``mirror`` and write a signed bundle to ``output``.

    :param sign_key: the operator key, or several (a key rotation): each signs the manifest and the node check.
    :param epoch: the build time; default SOURCE_DATE_EPOCH, else now.
    :param expires: how long after the build time nodes accept the bundle (None: no expiry).
    :param meter: told the bytes written as members go into the bundle (the CLI's terminal meter).
    :param info_cache: the package query cache (default :func:`mirror.hostenv.package_info_cache`).
    :param node_wheels: the wheels the node tool carries (default: the vendored ones, checked against
        their sha256 pins; see :func:`mirror.bundle.zipapp.vendored_wheels`).
    :raises ToolError: (subclasses) when the mirror lacks something, signing fails, or a package
        on disk no longer matches its verified digest; no output is left behind then.
    """
    if not targets and locked is None:
        raise UsageError("name at least one --target, e.g. --target deb/amd64")
    with reading(mirror):  # no sync switches files in while they are read
        selection = select_from_mirror(
            mirror, version=version, targets=targets, channel=channel, locked=locked
        )
        return build_from_selection(
            selection,
            sign_key=sign_key,
            gnupghome=gnupghome,
            output=output,
            compression=compression,
            split=split,
            node_wheels=node_wheels,
            epoch=epoch,
            info_cache=info_cache,
            meter=meter,
            expires=expires,
        )


def build_from_selection(
    selection: MirrorSelection,
    *,
    sign_key: str | Sequence[str],
    gnupghome: Path | None,
    output: Path,
    compression: str = "zstd",
    split: int | None = None,
    node_wheels: Sequence[Wheel] | None = None,
    epoch: int | None = None,
    info_cache: Path | None = None,
    meter: Meter | None = None,
    expires: timedelta | None = None,
) -> BuildResult:
    """Write the bundle for an already-selected set of targets (see :func:`build_bundle`)."""
    meter = meter or NoMeter()
    epoch = build_epoch() if epoch is None else epoch
    built = datetime.fromtimestamp(epoch, tz=timezone.utc)
    created = format_time(built)
    if expires is not None and built + expires <= utc_now():
        raise UsageError(
            f"--expires: the bundle would expire {format_time(built + expires)}, which is already past: its build "
            f"time is {created} (SOURCE_DATE_EPOCH); give a longer duration or a later SOURCE_DATE_EPOCH"
        )
    keys = SigningKeys.find([sign_key] if isinstance(sign_key, str) else sign_key, gnupghome)
    key = keys.primary
    info_cache = info_cache or package_info_cache()
    repos = [
        build_target_repo(t, key=key, epoch=epoch, channel=selection.channel, info_cache=info_cache)
        for t in selection.targets
    ]
    node_files = {
        NODE_TOOL: build_zipapp(epoch=PYZ_EPOCH, wheels=node_wheels),
        INSTALL_SH: _INSTALL_SH_SOURCE.read_bytes(),
    }
    sums = render_sums(node_files)
    generated: dict[str, tuple[bytes, str]] = {
        NODE_SUMS: (sums, "node-checksums"),
        # at the build time, like the embedded repos' signatures: deterministic, so the manifest that lists it is too
        NODE_SUMS_SIGNATURE: (keys.sign_detached(sums, at=epoch), "node-checksums-signature"),
        NODE_TOOL: (node_files[NODE_TOOL], "node-tool"),
        INSTALL_SH: (node_files[INSTALL_SH], "node-installer"),
        OPERATOR_KEY: (keys.public_key(), "operator-key"),
    }
    for repo in repos:
        for path, data in repo.metadata.items():
            generated[path] = (data, "repo-metadata")
    # Named after the content, not the output file, so renaming the output keeps builds identical.
    name = f"gpu-airgap-bundle-{upstream_version(selection.targets[0].toolkit_version)}-{selection.channel}"
    sbom = render_spdx(
        bundle_name=name, created=created, tool_version=VERSION, packages=_sbom_packages(repos)
    )
    generated[SBOM_NAME] = (sbom, "sbom")
    manifest = _manifest(selection, repos, generated, created=created, signers=keys.fingerprints)
    if expires is not None:  # from the build time, so two builds with one SOURCE_DATE_EPOCH stay identical
        manifest = dataclasses.replace(manifest, expires=format_time(built + expires))
    manifest_bytes = manifest.to_json()
    signature = keys.sign_detached(manifest_bytes)
    packages = {p.member: p for repo in repos for p in repo.packages}
    clash = set(packages) & set(generated)
    if clash or len(packages) != sum(len(r.packages) for r in repos):
        raise ToolError(
            f"two bundle members would share a name ({', '.join(sorted(clash)) or 'a package file'}); rename in the mirror"
        )
    payload = len(manifest_bytes) + len(signature)
    meter.start(
        payload
        + sum(len(data) for data, _ in generated.values())
        + sum(p.source.size for p in packages.values())
    )
    try:
        with BundleWriter(output, compression=compression, mtime=epoch, split=split) as writer:
            writer.add_bytes(MANIFEST_NAME, manifest_bytes)
            writer.add_bytes(SIGNATURE_NAME, signature)
            meter.advance(payload)
            for name in [*HEAD, *sorted((set(generated) | set(packages)) - set(HEAD))]:
                if name in generated:
                    writer.add_bytes(name, generated[name][0], executable=name == INSTALL_SH)
                    size = len(generated[name][0])
                else:
                    pkg = packages[name]
                    writer.add_file(name, pkg.source.path, size=pkg.source.size, sha256=pkg.sha256)
                    size = pkg.source.size
                payload += size
                meter.advance(size)
            outputs = writer.commit(
                lambda parts: _checksum_list(output, parts, keys) if split is not None else {},
                check_first=_first_part_check(
                    split, [manifest_bytes, signature, *(generated[n][0] for n in HEAD)]
                ),
            )
    except OSError as exc:  # writing the output: a full disk, a read-only directory, ...
        if NoSpaceError.matches(exc):
            raise NoSpaceError(output, "no bundle was written") from exc
        raise ToolError(f"cannot write {output}: {exc.strerror or exc}; no bundle was written") from exc
    finally:
        meter.close()
    return BuildResult(tuple(outputs), manifest, len(generated) + len(packages) + 2, payload)


def _first_part_check(split: int | None, head: list[bytes]) -> Callable[[Path], None] | None:
    """A node reads the node check from FILE.part001 alone: with ``--split`` it must be whole in the first part."""
    if split is None:
        return None
    size = split
    head_bytes = head_size([len(data) for data in head])
    return lambda part: check_first_part(part, HEAD, split=size, head_bytes=head_bytes)


def _checksum_list(output: Path, parts: list[tuple[Path, Path]], key: SigningKeys) -> dict[str, bytes]:
    """``FILE.sha256sums`` over the parts (hashed from their temporary files) and its detached signature."""
    data = "".join(f"{file_digest(tmp, 'sha256')}  {final.name}\n" for tmp, final in parts).encode()
    listing = output.name + ".sha256sums"
    return {listing: data, listing + ".asc": key.sign_detached(data)}


def _sbom_packages(repos: list[TargetRepo]) -> list[SbomPackage]:
    return [
        SbomPackage(
            name=p.source.name,
            version=p.source.version,
            arch=p.source.arch,
            file=p.member,
            sha256=p.sha256,
            origin=p.source.origin,
            target=repo.repo_dir.rsplit("/", 1)[-1],
        )
        for repo in repos
        for p in repo.packages
    ]


def _manifest(
    selection: MirrorSelection,
    repos: list[TargetRepo],
    generated: dict[str, tuple[bytes, str]],
    *,
    created: str,
    signers: tuple[str, ...],
) -> Manifest:
    targets = []
    for repo in repos:
        sel = repo.selection
        targets.append(
            TargetEntry(
                format=sel.format,
                arch=sel.arch,
                repo_dir=repo.repo_dir,
                toolkit_version=sel.toolkit_version,
                provenance=sel.provenance,
                packages=tuple(
                    PackageEntry(
                        name=p.source.name,
                        version=p.source.version,
                        arch=p.source.arch,
                        file=p.member,
                        size=p.source.size,
                        sha256=p.sha256,
                        install_order=index,
                        depends=p.depends,
                        origin=p.source.origin,
                        breaks=sel.breaks_of(p.source.name),
                        header=p.header.shown(),
                        file_digest_algo=p.header.file_digest_algo,
                    )
                    for index, p in enumerate(repo.packages)
                ),
                node_requirements=sel.node_requirements,
            )
        )
    fingerprints = {t.provenance.fingerprint for t in selection.targets}
    return Manifest(
        tool_version=VERSION,
        created=created,
        channel=selection.channel,
        toolkit_version=upstream_version(selection.targets[0].toolkit_version),
        upstream_url=selection.upstream,
        upstream_fingerprint=sorted(fingerprints)[0],
        signer=signers[0],
        signers=signers if len(signers) > 1 else (),
        targets=tuple(targets),
        files=tuple(
            FileEntry(path, len(data), hashlib.sha256(data).hexdigest(), role)
            for path, (data, role) in sorted(generated.items())
        ),
    )


def fips_warnings(manifest: Manifest) -> dict[str, str]:
    """Target (``rpm/x86_64``) -> why its rpms would not install on a FIPS node, for each such target."""
    warnings = {}
    for target in manifest.targets:
        if target.format != "rpm":
            continue
        name = f"{target.format}/{target.arch}"
        digests = [(p.name, p.file_digest_algo) for p in target.packages]
        warning = build_warning(name, upstream_version(target.toolkit_version), digests)
        if warning is not None:
            warnings[name] = warning
    return warnings
