"""What the bundle builder takes from a mirror: per target, the packages of one release and their provenance.

This is the seam between ``mirror sync``'s on-disk state and :mod:`mirror.bundle_build`. The
builder only sees :class:`TargetSelection`; :func:`select_from_mirror` reads the mirror's state
file (``DEST/.gpu-airgap/state.json``, written by ``mirror sync``: repos keyed
``<channel>/<format>/<arch>`` with provenance, stored packages and releases in install order)
and picks one release per requested target.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configure.errors import ToolError, UsageError
from configure.fsutil import safe_join

STATE_FILE = Path(".gpu-airgap") / "state.json"
#: Either spelling of an arch is accepted on the command line; the repo uses its format's own.
_ARCH_ALIASES = {
    "deb": {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el"},
    "rpm": {"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le"},
}


class SourceError(ToolError):
    """The mirror cannot supply what the bundle asks for."""


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


@dataclass(frozen=True)
class SignedUpstreamFile:
    """A signed upstream metadata file, as the mirror verified it."""

    path: str
    size: int
    sha256: str | None
    sha512: str | None


@dataclass(frozen=True)
class TargetSelection:
    """One target's release: packages in install order, node requirements and provenance."""

    format: str
    arch: str
    toolkit_version: str
    packages: tuple[SourcePackage, ...]
    node_requirements: tuple[str, ...]
    base_url: str
    fingerprint: str
    signed_at: str | None
    signed_files: tuple[SignedUpstreamFile, ...]


@dataclass(frozen=True)
class MirrorSelection:
    """Everything the builder needs from a mirror."""

    upstream: str
    channel: str
    targets: tuple[TargetSelection, ...]


def parse_target(spec: str) -> tuple[str, str]:
    """``deb/amd64`` -> ``("deb", "amd64")``, mapping the other arch spelling (``deb/x86_64``).

    :raises UsageError: for anything but ``deb/ARCH`` or ``rpm/ARCH``.
    """
    fmt, _, arch = spec.partition("/")
    if fmt not in _ARCH_ALIASES or not arch or "/" in arch:
        raise UsageError(f"--target {spec!r} must look like deb/amd64 or rpm/x86_64")
    return fmt, _ARCH_ALIASES[fmt].get(arch, arch)


def upstream_version(version: str) -> str:
    """``1.17.8-1`` -> ``1.17.8`` (strip the Debian revision / rpm release)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def select_from_mirror(mirror: Path, *, version: str, targets: list[tuple[str, str]], channel: str | None) -> MirrorSelection:
    """Pick ``version`` (``latest``, ``1.17.8`` or ``1.17.8-1``) for each target from the mirror at ``mirror``.

    :raises SourceError: when the mirror has no state, or lacks a target or the version.
    """
    try:
        raw = json.loads((mirror / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SourceError(f"{mirror} is not a gpu-airgap mirror (no {STATE_FILE}); run `gpu-airgap mirror sync` first") from None
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot read the mirror state in {mirror}: {exc}") from exc
    try:
        return _select(raw, mirror, version=version, targets=targets, channel=channel)
    except (KeyError, TypeError, ValueError) as exc:
        raise SourceError(f"the mirror state in {mirror} is malformed ({exc!r}); re-run `gpu-airgap mirror sync`") from exc


def _select(
    raw: dict[str, Any], mirror: Path, *, version: str, targets: list[tuple[str, str]], channel: str | None
) -> MirrorSelection:
    channel = channel or str(raw["channel"])
    repos = {str(r["key"]): r for r in raw["repos"]}
    chosen = []
    for fmt, arch in targets:
        key = f"{channel}/{fmt}/{arch}"
        repo = repos.get(key)
        if repo is None:
            held = ", ".join(sorted(repos)) or "nothing"
            raise SourceError(f"the mirror has no {key} repository (it holds {held}); sync it first")
        release = _pick_release(repo, version, key)
        stored = {str(p["path"]): p for p in repo["packages"]}
        packages = []
        for path in release["packages"]:
            pkg = stored.get(path)
            if pkg is None:
                raise SourceError(f"the mirror state names {path} in release {release['toolkit_version']} but holds no such package")
            packages.append(
                SourcePackage(
                    name=str(pkg["name"]),
                    version=str(pkg["version"]),
                    arch=str(pkg["arch"]),
                    path=safe_join(mirror, str(pkg["path"])),
                    size=int(pkg["size"]),
                    sha256=pkg.get("sha256"),
                    sha512=pkg.get("sha512"),
                    origin=str(pkg.get("url", "")),
                )
            )
        prov = repo["provenance"]
        chosen.append(
            TargetSelection(
                format=fmt,
                arch=arch,
                toolkit_version=str(release["toolkit_version"]),
                packages=tuple(packages),
                node_requirements=tuple(release.get("node_requirements", ())),
                base_url=str(repo["base_url"]),
                fingerprint=str(prov["fingerprint"]),
                signed_at=prov.get("signed_at"),
                signed_files=tuple(
                    SignedUpstreamFile(str(f["path"]), int(f["size"]), f.get("sha256"), f.get("sha512"))
                    for f in prov["signed_files"]
                ),
            )
        )
    versions = {upstream_version(t.toolkit_version) for t in chosen}
    if len(versions) > 1:
        raise SourceError(f"the targets resolve to different toolkit versions ({', '.join(sorted(versions))}); pass --version")
    return MirrorSelection(upstream=str(raw["upstream"]), channel=channel, targets=tuple(chosen))


def _pick_release(repo: dict[str, Any], version: str, key: str) -> dict[str, Any]:
    releases = list(repo["releases"])
    if not releases:
        raise SourceError(f"the mirror's {key} repository holds no toolkit release")
    if version == "latest":
        return dict(releases[-1])  # the state lists releases oldest first
    for release in releases:
        full = str(release["toolkit_version"])
        if version in (full, upstream_version(full)):
            return dict(release)
    have = ", ".join(str(r["toolkit_version"]) for r in releases)
    raise UsageError(f"the mirror's {key} repository has no toolkit {version} (it has {have}); sync it first")
