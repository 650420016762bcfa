"""The ready local repository each bundle target carries, signed by the operator key.

- deb: an apt flat repo — the ``.deb`` files beside ``Packages``, ``Packages.xz`` and a
  clearsigned ``InRelease`` (SHA256 and SHA512 of both indexes), usable as
  ``deb [signed-by=operator.gpg] file:/…/targets/deb-amd64 ./``.
- rpm: a yum repo — the ``.rpm`` files plus ``repodata/`` made by ``createrepo_c`` and
  ``repodata/repomd.xml.asc``.

The metadata itself is made by :mod:`mirror.signing.repos` (shared with ``mirror publish``); this
module adds what the bundle manifest needs per package. Only small metadata is produced in memory;
package files are streamed into the archive later by the builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mirror.bundle.source import TargetSelection
from mirror.index.header import PackageHeader
from mirror.model import SourcePackage
from mirror.signing.key import OperatorKey
from mirror.signing.repos import AptEntry, ReleaseLabels, apt_metadata, package_headers, yum_metadata

__all__ = ["BUNDLE_LABELS", "RepoPackage", "TargetRepo", "build_target_repo"]

BUNDLE_LABELS: Final = ReleaseLabels(
    origin="gpu-airgap",
    label="gpu-airgap offline bundle",
    description="NVIDIA Container Toolkit packages re-signed by the bundle operator",
)


@dataclass(frozen=True)
class RepoPackage:
    """A package placed in a target repo, with the facts the manifest needs."""

    source: SourcePackage
    member: str  #: archive path, ``targets/deb-amd64/<file>``
    sha256: str
    header: PackageHeader  #: what the package says about itself (it agrees with its signed index entry)

    @property
    def depends(self) -> tuple[str, ...]:
        """Its dependencies, from its own header."""
        return self.header.depends


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
    :param info_cache: where each package's header is kept, under its recorded digest, so a later
        build neither re-reads nor re-hashes it (None: read every time).
    :raises HeaderMismatch: when a package's own header disagrees with its signed index entry.
    """
    repo_dir = f"targets/{selection.format}-{selection.arch}"
    facts = package_headers(selection.format, selection.packages, info_cache)
    packages = tuple(
        RepoPackage(pkg, f"{repo_dir}/{pkg.path.name}", fact.sha256, fact.header)
        for pkg, fact in zip(selection.packages, facts)
    )
    if selection.format == "deb":
        entries = [AptEntry(p.source, p.sha256, p.header.fields) for p in packages]
        metadata = apt_metadata(
            entries, arch=selection.arch, key=key, epoch=epoch, channel=channel, labels=BUNDLE_LABELS
        )
    else:
        metadata = yum_metadata([p.source.path for p in packages], key=key, epoch=epoch)
    return TargetRepo(selection, repo_dir, packages, {f"{repo_dir}/{k}": v for k, v in metadata.items()})
