"""What the local upstream contains: packages, versions, relations and payload, as pure data.

Every stand-in package copies its control fields (Depends, Breaks, Replaces, Section, Priority,
Multi-Arch, Source, Maintainer, Homepage, Description) from the stanza of the *real* package of the
same version in ``tests/data/real-upstream/stable/deb/amd64/Packages`` (NVIDIA's stable amd64 index
at 1.20.1). Versions that index does not carry (experimental ``1.20.0~rc.1``) take the stanza of
the release they precede (``1.20.0``) with the version numbers inside relations rewritten.

Known simplifications, on purpose:

- arm64 uses the amd64 relations (the real arm64 tools of 1.14.x want ``libc6 (>= 2.17)``).
- The legacy ``nvidia-container-runtime`` 3.14.0 and ``nvidia-docker2`` 2.14.0 (``Architecture:
  all``) live in the stable channel only.
- rpm relations are the deb ones in rpm syntax (:func:`rpm_relations`); Debian system libraries
  map to their Fedora/RHEL names (:data:`RPM_SYSTEM_NAMES`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from debian.debian_support import Version

REAL_UPSTREAM: Final = Path(__file__).resolve().parent.parent / "data" / "real-upstream"
REAL_PACKAGES: Final = REAL_UPSTREAM / "stable" / "deb" / "amd64" / "Packages"
#: The base URL the real ``.list``/``.repo`` files name; the generated ones keep it (see README).
REAL_BASE_URL: Final = "https://nvidia.github.io/libnvidia-container"

DEFAULT_STABLE: Final = ("1.17.8-1", "1.18.0-1", "1.20.1-1")
DEFAULT_EXPERIMENTAL: Final = ("1.20.0~rc.1-1",)
TOOLKIT_PACKAGES: Final = (
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
    "libnvidia-container-dev",
)
LEGACY_PACKAGES: Final = (("nvidia-container-runtime", "3.14.0-1"), ("nvidia-docker2", "2.14.0-1"))

#: channel -> deb architectures / rpm architectures, as in the real stable/ and experimental/.
DEB_ARCHES: Final = ("amd64", "arm64")
RPM_ARCHES: Final = ("x86_64", "aarch64")
DEB_TO_RPM_ARCH: Final = {"amd64": "x86_64", "arm64": "aarch64", "all": "noarch"}
TRIPLET: Final = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

#: Debian system library package -> the rpm package that provides it on RHEL/Fedora/Amazon Linux.
#: Debian epochs (``1:2.10``) and snapshot versions (``0.0.0~20120605``) mean nothing to rpm, so
#: the epoch is dropped and libseccomp stays unversioned.
RPM_SYSTEM_NAMES: Final = {"libc6": "glibc", "libcap2": "libcap", "libseccomp2": "libseccomp"}
_RPM_UNVERSIONED: Final = {"libseccomp2"}
_DEB_TO_RPM_OP: Final = {"=": "=", ">=": ">=", "<=": "<=", "<<": "<", ">>": ">"}

#: Fields a .deb control file carries; Packages adds Filename/Size/hashes before Homepage.
INDEX_ONLY_FIELDS: Final = ("Filename", "Size", "MD5sum", "SHA1", "SHA256", "SHA512")


@dataclass(frozen=True)
class PayloadFile:
    """One file inside a stand-in package."""

    path: str  #: absolute path on the target system
    content: bytes
    mode: int = 0o644
    conffile: bool = False


@dataclass(frozen=True)
class PackageSpec:
    """Everything needed to build one stand-in package in both formats."""

    name: str
    version: str  #: full deb version, e.g. ``1.17.8-1`` or ``1.20.0~rc.1-1``
    arch: str  #: deb arch: amd64, arm64 or all
    fields: tuple[tuple[str, str], ...]  #: control fields in the real Packages order (no index-only fields)
    files: tuple[PayloadFile, ...]

    @property
    def upstream_version(self) -> str:
        """The version without the Debian revision: ``1.17.8``."""
        return self.version.rsplit("-", 1)[0]

    @property
    def revision(self) -> str:
        """The Debian revision, used as the rpm Release: ``1``."""
        return self.version.rsplit("-", 1)[1]

    @property
    def deb_filename(self) -> str:
        """The file name NVIDIA uses: ``nvidia-container-toolkit_1.17.8-1_amd64.deb``."""
        return f"{self.name}_{self.version}_{self.arch}.deb"

    @property
    def rpm_arch(self) -> str:
        """The rpm architecture of this package: x86_64, aarch64 or noarch."""
        return DEB_TO_RPM_ARCH[self.arch]

    @property
    def rpm_filename(self) -> str:
        """The rpm file name: ``nvidia-container-toolkit-1.17.8-1.x86_64.rpm``."""
        return f"{self.name}-{self.upstream_version}-{self.revision}.{self.rpm_arch}.rpm"

    def field(self, name: str) -> str | None:
        """The value of control field ``name`` or None."""
        return next((v for k, v in self.fields if k == name), None)


def parse_stanzas(text: str) -> list[list[tuple[str, str]]]:
    """Split a Packages file into stanzas of ordered ``(field, value)`` pairs (continuations kept)."""
    stanzas: list[list[tuple[str, str]]] = []
    for block in text.strip("\n").split("\n\n"):
        fields: list[tuple[str, str]] = []
        for line in block.split("\n"):
            if line.startswith((" ", "\t")):
                name, value = fields[-1]
                fields[-1] = (name, value + "\n" + line)
            else:
                name, _, value = line.partition(":")
                fields.append((name, value.strip()))
        stanzas.append(fields)
    return stanzas


def load_templates(path: Path = REAL_PACKAGES) -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    """Index the real stanzas by ``(package, version)``, index-only fields removed."""
    templates = {}
    for stanza in parse_stanzas(path.read_text(encoding="ascii")):
        values = dict(stanza)
        kept = tuple((k, v) for k, v in stanza if k not in INDEX_ONLY_FIELDS)
        templates[(values["Package"], values["Version"])] = kept
    return templates


def real_toolkit_versions(templates: Mapping[tuple[str, str], object]) -> list[str]:
    """Every version of nvidia-container-toolkit the real index has, newest first."""
    found = {v for (name, v) in templates if name == "nvidia-container-toolkit"}
    return sorted(found, key=Version, reverse=True)


def choose_stable_versions(
    stable: tuple[str, ...], extra_versions: int, available: list[str]
) -> tuple[str, ...]:
    """``stable`` plus ``extra_versions`` more real versions (newest first), sorted oldest first.

    :raises ValueError: when more extra versions are asked for than the real index has.
    """
    spare = [v for v in available if v not in stable]
    if extra_versions > len(spare):
        raise ValueError(f"only {len(spare)} more real versions exist, {extra_versions} were asked for")
    return tuple(sorted({*stable, *spare[:extra_versions]}, key=Version))


def _template_version(version: str, templates: Mapping[tuple[str, str], object], name: str) -> str:
    """The real version whose stanza shapes ``version``: itself, or the release an rc precedes."""
    if (name, version) in templates:
        return version
    base = version.split("~", 1)[0].rsplit("-", 1)[0] + "-1"
    if (name, base) in templates:
        return base
    raise ValueError(f"no real stanza of {name} to model version {version} on")


def _retarget(
    fields: tuple[tuple[str, str], ...], old: str, new: str, arch: str
) -> tuple[tuple[str, str], ...]:
    """Rewrite version/arch of a template stanza, including ``(= 1.20.0-1)``/``(>= 1.20.0)`` in relations."""
    old_up, new_up = old.rsplit("-", 1)[0], new.rsplit("-", 1)[0]
    pattern = re.compile(r"\((=|>=|<=|<<|>>) " + re.escape(old_up) + r"(-1)?\)")

    def sub(match: re.Match[str]) -> str:
        return f"({match.group(1)} {new_up}{match.group(2) or ''})"

    out = []
    for key, value in fields:
        if key == "Version":
            value = new
        elif key == "Architecture":
            value = arch
        elif key in ("Depends", "Breaks", "Replaces"):
            value = pattern.sub(sub, value)
        out.append((key, value))
    return tuple(out)


def payload_for(name: str, version: str, arch: str, *, rpm: bool = False) -> tuple[PayloadFile, ...]:
    """The stand-in files of a package, at the paths the real package uses."""
    up = version.rsplit("-", 1)[0]
    libdir = "/usr/lib64" if rpm else f"/usr/lib/{TRIPLET.get(arch, 'x86_64-linux-gnu')}"

    def script(tool: str) -> PayloadFile:
        body = f'#!/bin/sh\necho "{tool} version {up} (gpu-airgap stand-in)"\n'
        return PayloadFile(f"/usr/bin/{tool}", body.encode(), 0o755)

    if name == "libnvidia-container1":
        text = f'#!/bin/sh\necho "libnvidia-container.so.1 version {up} (gpu-airgap stand-in)"\n'
        return (PayloadFile(f"{libdir}/libnvidia-container.so.1", text.encode(), 0o755),)
    if name == "libnvidia-container-tools":
        return (script("nvidia-container-cli"),)
    if name == "nvidia-container-toolkit-base":
        return (
            script("nvidia-ctk"),
            script("nvidia-container-runtime"),
            script("nvidia-cdi-hook"),
            PayloadFile(
                "/etc/nvidia-container-runtime/config.toml", _config_toml(up, rpm).encode(), conffile=True
            ),
        )
    if name == "nvidia-container-toolkit":
        return (script("nvidia-container-runtime-hook"),)
    if name == "libnvidia-container-dev":
        header = f"/* nvc.h {up} (gpu-airgap stand-in) */\n"
        return (PayloadFile("/usr/include/nvc.h", header.encode()),)
    if name == "nvidia-docker2":
        return (script("nvidia-docker"),)
    doc = f"{name} {up} (gpu-airgap stand-in meta-package)\n"
    return (PayloadFile(f"/usr/share/doc/{name}/README.stand-in", doc.encode()),)


def _config_toml(version: str, rpm: bool) -> str:
    ldconfig = "@/sbin/ldconfig" if rpm else "@/sbin/ldconfig.real"
    return (
        f"# nvidia-container-runtime config {version} (gpu-airgap stand-in)\n"
        "#accept-nvidia-visible-devices-as-volume-mounts = false\n"
        "disable-require = false\n"
        'supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"\n\n'
        "[nvidia-container-cli]\n"
        "environment = []\n"
        f'ldconfig = "{ldconfig}"\n'
        "load-kmods = true\n\n"
        "[nvidia-container-runtime]\n"
        'log-level = "info"\n'
        'mode = "auto"\n'
        'runtimes = ["docker-runc", "runc", "crun"]\n\n'
        "[nvidia-container-runtime-hook]\n"
        'path = "nvidia-container-runtime-hook"\n'
        "skip-mode-detection = false\n\n"
        "[nvidia-ctk]\n"
        'path = "nvidia-ctk"\n'
    )


def package_specs(
    versions: tuple[str, ...],
    *,
    arch: str,
    legacy: bool,
    templates: dict[tuple[str, str], tuple[tuple[str, str], ...]],
) -> list[PackageSpec]:
    """The stand-in packages of one channel and deb architecture (``all`` packages when ``legacy``)."""
    specs = []
    for version in versions:
        for name in TOOLKIT_PACKAGES:
            model = _template_version(version, templates, name)
            fields = _retarget(templates[(name, model)], model, version, arch)
            specs.append(PackageSpec(name, version, arch, fields, payload_for(name, version, arch)))
    if legacy:
        for name, version in LEGACY_PACKAGES:
            fields = templates[(name, version)]
            specs.append(PackageSpec(name, version, "all", fields, payload_for(name, version, "all")))
    return specs


def index_sort_key(spec: PackageSpec) -> tuple[str, Version]:
    """apt-ftparchive's order: by file name (``_`` sorts after ``-``), then by version."""
    return (spec.name + "_", Version(spec.version))


def _split_relations(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def rpm_relations(value: str | None) -> list[str]:
    """Translate a deb relation field to rpm ``Requires:`` entries, one per relation.

    ``libnvidia-container-tools (<< 2.0.0)`` -> ``libnvidia-container-tools < 2.0.0``;
    ``libcap2 (>= 1:2.10)`` -> ``libcap >= 2.10``; ``libseccomp2 (>= ...)`` -> ``libseccomp``.
    """
    out = []
    for rel in _split_relations(value or ""):
        match = re.fullmatch(r"([^\s(]+)(?:\s*\((=|>=|<=|<<|>>)\s*([^)]+)\))?", rel)
        if match is None:
            raise ValueError(f"cannot translate relation {rel!r}")
        name, op, version = match.groups()
        rpm_name = RPM_SYSTEM_NAMES.get(name, name)
        if op is None or name in _RPM_UNVERSIONED:
            out.append(rpm_name)
            continue
        if name in RPM_SYSTEM_NAMES and ":" in version:
            version = version.split(":", 1)[1]
        out.append(f"{rpm_name} {_DEB_TO_RPM_OP[op]} {version}")
    return out
