"""``gpu-airgap.lock``: the exact resolved package set, in human-readable TOML, for fleets.

``sync --write-lock FILE`` records what a sync resolved; ``sync --locked FILE`` takes the same
packages again (same name, version, file, size and checksums, verified by the same key) or fails
listing every difference. Example::

    # gpu-airgap.lock - written by gpu-airgap; `gpu-airgap mirror sync --locked` reproduces it.
    version = 1
    channel = "stable"
    toolkit_version = "1.17.8-1"
    upstream = "https://nvidia.github.io/libnvidia-container"

    [[target]]
    format = "deb"
    arch = "amd64"
    toolkit_version = "1.17.8-1"
    key_fingerprint = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"

    [[target.package]]
    name = "libnvidia-container1"
    version = "1.17.8-1"
    ...
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

import tomlkit
from tomlkit.exceptions import TOMLKitError

from plumbing.errors import ConfigFormatError
from plumbing.fsutil import atomic_write

LOCK_VERSION: Final = 1
HEADER: Final = "gpu-airgap.lock - written by gpu-airgap; `gpu-airgap mirror sync --locked` reproduces it."


@dataclass(frozen=True)
class LockedPackage:
    """One package exactly as signed upstream metadata described it."""

    name: str
    version: str
    arch: str
    filename: str  #: as the index names it, relative to the repo base
    size: int
    url: str
    sha256: str | None = None
    sha512: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """(name, version, arch)."""
        return (self.name, self.version, self.arch)


@dataclass(frozen=True)
class LockedTarget:
    """The packages locked for one (format, arch) repository, in install order."""

    format: str
    arch: str
    toolkit_version: str
    key_fingerprint: str
    packages: tuple[LockedPackage, ...]

    @property
    def label(self) -> str:
        """``deb/amd64``."""
        return f"{self.format}/{self.arch}"


@dataclass(frozen=True)
class Lockfile:
    """A whole lockfile: channel, upstream and the locked targets."""

    channel: str
    upstream: str
    targets: tuple[LockedTarget, ...]

    @property
    def toolkit_version(self) -> str:
        """The toolkit release of the first target (all targets normally share it)."""
        return self.targets[0].toolkit_version if self.targets else ""

    def render(self) -> str:
        """The TOML text."""
        doc = tomlkit.document()
        doc.add(tomlkit.comment(HEADER))
        doc["version"] = LOCK_VERSION
        doc["channel"] = self.channel
        doc["toolkit_version"] = self.toolkit_version
        doc["upstream"] = self.upstream
        targets = tomlkit.aot()
        for target in self.targets:
            table = tomlkit.table()
            for name in ("format", "arch", "toolkit_version", "key_fingerprint"):
                table[name] = getattr(target, name)
            packages = tomlkit.aot()
            for pkg in target.packages:
                entry = tomlkit.table()
                for f in fields(LockedPackage):
                    value = getattr(pkg, f.name)
                    if value is not None:
                        entry[f.name] = value
                packages.append(entry)
            table["package"] = packages
            targets.append(table)
        doc["target"] = targets
        return tomlkit.dumps(doc)

    def save(self, path: Path) -> None:
        """Write the lockfile atomically."""
        atomic_write(path, self.render().encode())

    @classmethod
    def load(cls, path: Path) -> Lockfile:
        """Read and validate ``path``.

        :raises ConfigFormatError: when it is missing, not TOML, or not a gpu-airgap lockfile.
        """
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigFormatError(path, f"cannot read the lockfile: {exc.strerror or exc}") from exc
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text: str, path: object = "gpu-airgap.lock") -> Lockfile:
        """Parse lockfile ``text``; ``path`` only names it in errors."""
        try:
            raw: dict[str, Any] = tomlkit.parse(text).unwrap()
        except TOMLKitError as exc:
            raise ConfigFormatError(path, f"is not valid TOML ({exc})") from exc
        if raw.get("version") != LOCK_VERSION:
            raise ConfigFormatError(path, f"is not a version {LOCK_VERSION} gpu-airgap lockfile")
        try:
            targets = tuple(
                LockedTarget(
                    format=str(t["format"]),
                    arch=str(t["arch"]),
                    toolkit_version=str(t["toolkit_version"]),
                    key_fingerprint=str(t["key_fingerprint"]),
                    packages=tuple(_package(p) for p in t.get("package", [])),
                )
                for t in raw.get("target", [])
            )
            lock = cls(channel=str(raw["channel"]), upstream=str(raw.get("upstream", "")), targets=targets)
        except (
            AttributeError,
            KeyError,
            TypeError,
            ValueError,
        ) as exc:  # AttributeError: a value where a table belongs
            raise ConfigFormatError(path, f"lacks a required field ({exc})") from exc
        if not lock.targets or any(not t.packages for t in lock.targets):
            raise ConfigFormatError(path, "names no packages to lock")
        return lock


def _package(raw: dict[str, Any]) -> LockedPackage:
    if not raw.get("sha256") and not raw.get("sha512"):
        raise ValueError(f"package {raw.get('name')!r} has no checksum")
    return LockedPackage(
        name=str(raw["name"]),
        version=str(raw["version"]),
        arch=str(raw["arch"]),
        filename=str(raw["filename"]),
        size=int(raw["size"]),
        url=str(raw["url"]),
        sha256=raw.get("sha256"),
        sha512=raw.get("sha512"),
    )


def differences(locked: LockedTarget, actual: LockedTarget) -> list[str]:
    """Every way ``actual`` (what upstream now offers) differs from ``locked``; empty if identical.

    URLs are not compared: the same lockfile may be reproduced from another mirror of upstream.
    """
    problems: list[str] = []
    if locked.key_fingerprint != actual.key_fingerprint:
        problems.append(
            f"{locked.label} is signed by {actual.key_fingerprint}, the lock names {locked.key_fingerprint}"
        )
    have = {p.key: p for p in actual.packages}
    for pkg in locked.packages:
        now = have.get(pkg.key)
        if now is None:
            problems.append(f"{pkg.name} {pkg.version} ({pkg.arch}) is no longer in {locked.label}")
            continue
        for attr in ("filename", "size", "sha256", "sha512"):
            want, got = getattr(pkg, attr), getattr(now, attr)
            if want is not None and want != got:
                problems.append(f"{pkg.name} {pkg.version} ({pkg.arch}) {attr} changed from {want} to {got}")
    return problems
