"""NVIDIA's real toolkit packages, placed in the local upstream instead of stand-ins.

``tests/data/nvidia-from-source/`` (in the repository; ``GPU_AIRGAP_NVIDIA_BUILD`` overrides) holds
``nvidia-container-toolkit`` and ``nvidia-container-toolkit-base`` 1.20.0-1 built from NVIDIA's own
source and packaging: real binaries, conffile, systemd units and maintainer scripts, deb amd64 and
rpm x86_64, listed with their digests in ``SHA256SUMS``. The generator copies those files as they
are; the other packages of the release stay stand-ins with the real control fields.

The real .debs' Depends/Breaks/Replaces are those of NVIDIA's index for 1.20.0-1 (only sizes differ,
the Go build is not NVIDIA's), so the index stanza is the real one with the .deb's own
Installed-Size; :func:`prebuilt_installed_size` checks that the relations agree before using it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from plumbing.proc import run
from tests.upstream.catalog import PackageSpec

#: NVIDIA's toolkit built from source, checked into the repository with its README, LICENSE and SHA256SUMS.
NVIDIA_BUILD: Final = Path(
    os.environ.get("GPU_AIRGAP_NVIDIA_BUILD")
    or Path(__file__).resolve().parents[1] / "data" / "nvidia-from-source"
)
#: The release those packages are, and the real-packages profile's only toolkit version.
NVIDIA_BUILD_VERSION: Final = "1.20.0-1"
_CHECKED_FIELDS: Final = ("Package", "Version", "Architecture", "Depends", "Breaks", "Replaces")


@dataclass(frozen=True)
class Prebuilt:
    """A directory of real packages laid out as ``deb/<arch>/<file>.deb`` and ``rpm/<arch>/<file>.rpm``."""

    root: Path

    def missing_reason(self) -> str:
        """Why these packages cannot be used ("" when they can): absent, or not matching SHA256SUMS."""
        return sums_problem(self.root / "SHA256SUMS", what="NVIDIA's toolkit built from source")

    def fingerprint(self) -> bytes:
        """What identifies these inputs for a cache key: the SHA256SUMS bytes (b"" when absent)."""
        sums = self.root / "SHA256SUMS"
        return sums.read_bytes() if sums.is_file() else b""

    def deb(self, spec: PackageSpec) -> Path | None:
        """The real .deb for ``spec`` or None."""
        path = self.root / "deb" / spec.arch / spec.deb_filename
        return path if path.is_file() else None

    def rpm(self, spec: PackageSpec) -> Path | None:
        """The real .rpm for ``spec`` or None."""
        path = self.root / "rpm" / spec.rpm_arch / spec.rpm_filename
        return path if path.is_file() else None


def sums_problem(sums: Path, *, what: str) -> str:
    """What is wrong with the files a ``SHA256SUMS`` lists beside it ("" when each is there and matches)."""
    if not sums.is_file():
        return f"{what} is not at {sums.parent} (no SHA256SUMS)"
    for line in sums.read_text(encoding="ascii").splitlines():
        digest, _, name = line.partition("  ")
        path = sums.parent / name
        if not path.is_file():
            return f"{path} is listed in SHA256SUMS but missing"
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return f"{path} does not match its SHA256SUMS line"
    return ""


def require_artifact(problem: str) -> None:
    """Fail loudly on ``problem`` (from :func:`sums_problem`): these files are part of the repository.

    A test that skipped here would hide a broken checkout, so the tests that need them fail instead.

    :raises FileNotFoundError: naming what is missing or changed.
    """
    if problem:
        raise FileNotFoundError(
            f"{problem}: the repository carries it under tests/data (is the checkout complete?)"
        )


def checked_build(root: Path = NVIDIA_BUILD) -> Prebuilt:
    """NVIDIA's packages at ``root``, checked against their SHA256SUMS (:func:`require_artifact`)."""
    prebuilt = Prebuilt(root)
    require_artifact(prebuilt.missing_reason())
    return prebuilt


def prebuilt_installed_size(spec: PackageSpec, deb: Path) -> int:
    """The Installed-Size of the real ``deb``, after checking its relations are those of ``spec``.

    :raises ValueError: when the .deb's control fields disagree with the real index stanza.
    """
    control = run(["dpkg-deb", "--field", str(deb), *_CHECKED_FIELDS, "Installed-Size"]).stdout.decode()
    fields = dict(line.split(": ", 1) for line in control.splitlines() if ": " in line)
    for name in _CHECKED_FIELDS:
        if fields.get(name) != spec.field(name):
            raise ValueError(
                f"{deb.name}: {name} is {fields.get(name)!r}, the real index says {spec.field(name)!r}"
            )
    return int(fields["Installed-Size"])
