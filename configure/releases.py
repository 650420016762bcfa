"""What changes between NVIDIA Container Toolkit releases, in ONE table, each row citing its source.

Code that behaves differently by toolkit release asks :func:`release_for` for the row of a version
and reads its fields; no other module compares toolkit versions. A version newer than the last
row gets the last row (the newest behaviour we know), one older than the first gets the first.

Sources are NVIDIA's own: the packages (NVIDIA's ``Packages`` index in tests/data/real-upstream,
and the real 1.20.0-1 packages in tests/data/nvidia-from-source built from NVIDIA's packaging), the
changelog (``CHANGELOG.md``), the release notes on NVIDIA's documentation site, and the pull
requests and issues of NVIDIA/nvidia-container-toolkit named in each row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional, Tuple

#: the two units -base ships from 1.18.0 on; the path unit starts the service on driver changes
REFRESH_PATH_UNIT = "nvidia-cdi-refresh.path"
REFRESH_SERVICE_UNIT = "nvidia-cdi-refresh.service"
REFRESH_UNITS = (REFRESH_PATH_UNIT, REFRESH_SERVICE_UNIT)
#: the spec nvidia-cdi-refresh.service writes (its Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH)
REFRESH_OUTPUT = "/var/run/cdi/nvidia.yaml"
#: where the service reads overrides of that output (a conffile of -base)
REFRESH_ENV_FILE = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
#: the udev rule -base ships from 1.20.1 on: it starts nvidia-cdi-refresh.service when the driver loads
REFRESH_UDEV_RULE = "99-nvidia-cdi-refresh.rules"

Version = Tuple[int, int, int]


@dataclass(frozen=True)
class ToolkitRelease:
    """How one range of toolkit releases behaves where gpu-airgap cares."""

    first: Version  #: first release of the range
    last: Optional[Version]  #: last release of the range (None: open)
    exact_dependencies: bool  #: toolkit -> tools and tools -> lib1 are ``=`` (else ``>=``, ``<< 2.0.0``)
    refresh_unit_dirs: Tuple[str, ...]  #: where -base ships the refresh units (none: no units)
    refresh_preset: Optional[str]  #: a systemd preset file that enables them (rpm), if any
    enabled_by: str  #: how the packaging enables the units, in words
    containerd_drop_in: Optional[str]  #: where ``nvidia-ctk runtime configure --runtime=containerd`` writes
    notes: Tuple[str, ...]  #: the facts a user meets on this release, one sentence each
    source: str  #: where each fact of the row comes from
    #: the directories -base ships :data:`REFRESH_UDEV_RULE` in (deb, rpm); none: no rule
    refresh_udev_rule_dirs: Tuple[str, ...] = ()

    @property
    def has_refresh_units(self) -> bool:
        """-base ships nvidia-cdi-refresh.{path,service} on this release."""
        return bool(self.refresh_unit_dirs)

    def label(self) -> str:
        """``1.18.1-1.19.x`` or ``1.20.0+``."""
        first = ".".join(map(str, self.first))
        if self.last is None:
            return f"{first}+"
        last = ".".join(map(str, self.last))
        return first if last == first else f"{first}-{last}"


#: 1.20.0; 1.20.1 differs only by the udev rule
_R1200 = ToolkitRelease(
    first=(1, 20, 0),
    last=(1, 20, 0),
    exact_dependencies=True,
    refresh_unit_dirs=("/lib/systemd/system", "/usr/lib/systemd/system"),
    refresh_preset="/usr/lib/systemd/system-preset/90-nvidia-container-toolkit.preset",
    enabled_by="deb: deb-systemd-helper enable in postinst (no preset file); "
    "rpm: the preset file and systemctl preset in %post",
    containerd_drop_in="/etc/containerd/conf.d/99-nvidia.toml",
    notes=(
        "The units move to the vendor unit directory; deb removes the old /etc/systemd/system copies "
        "(dpkg-maintscript-helper rm_conffile, 1.20.0-1~) and rpm's %posttrans re-enables units whose "
        "enablement links pointed at them.",
    ),
    source="NVIDIA/nvidia-container-toolkit PR #1827 'Fix nvidia-cdi-refresh systemd packaging'; the real "
    "1.20.0-1 packages in tests/data/nvidia-from-source (deb: lib/systemd/system/, DEBIAN/postinst; rpm: "
    "usr/lib/systemd/system/, usr/lib/systemd/system-preset/90-nvidia-container-toolkit.preset, %post, %posttrans)",
)

RELEASES: Tuple[ToolkitRelease, ...] = (
    ToolkitRelease(
        first=(1, 14, 0),
        last=(1, 17, 9),
        exact_dependencies=False,
        refresh_unit_dirs=(),
        refresh_preset=None,
        enabled_by="nothing: there are no refresh units; a CDI spec exists only if someone generates it",
        containerd_drop_in=None,
        notes=(
            "Only toolkit -> base is exact: toolkit -> tools and tools -> lib1 are >= ranges below 2.0.0, "
            "so an offline pin must name all four packages.",
        ),
        source="NVIDIA's stable/deb Packages 1.14.0-1 to 1.17.9-1 (tests/data/real-upstream); "
        "NVIDIA's cdi-support docs: automatic CDI generation starts at v1.18.0",
    ),
    ToolkitRelease(
        first=(1, 18, 0),
        last=(1, 18, 0),
        exact_dependencies=True,
        refresh_unit_dirs=("/etc/systemd/system",),
        refresh_preset=None,
        enabled_by="the maintainer scripts, on a fresh install (NVIDIA's cdi-support docs: enabled and started automatically)",
        containerd_drop_in="/etc/containerd/config.d/99-nvidia.toml",
        notes=(
            "nvidia-ctk runtime configure writes the containerd drop-in to /etc/containerd/config.d/ "
            "(conf.d is containerd's) and imports config.d/*.toml, replacing any imports config.toml had; "
            "fixed in 1.18.1. configure verify flags the file when containerd ignores it or reads it "
            "next to another definition of the runtime (configure.ctk_leftovers).",
            "nvidia-cdi-refresh writes /var/run/cdi/nvidia.yaml at boot and when the driver changes.",
        ),
        source="NVIDIA/nvidia-container-toolkit PR #1076 (units installed to /etc/systemd/system); "
        "issue #1404 and PR #1407 (config.d instead of conf.d), PR #1382 (existing imports dropped), CHANGELOG v1.18.1 "
        "(PR #1496) 'Fix containerd drop-in config path' and 'Fix handling of existing imports in containerd'; "
        "stable/deb Packages 1.18.0-1 (exact dependencies, tests/data/real-upstream)",
    ),
    ToolkitRelease(
        first=(1, 18, 1),
        last=(1, 19, 99),
        exact_dependencies=True,
        refresh_unit_dirs=("/etc/systemd/system",),
        refresh_preset=None,
        enabled_by="the maintainer scripts, on a fresh install (NVIDIA's cdi-support docs: enabled and started automatically)",
        containerd_drop_in="/etc/containerd/conf.d/99-nvidia.toml",
        notes=(
            "nvidia-cdi-refresh writes /var/run/cdi/nvidia.yaml at boot and when the driver changes; "
            "1.18.2 makes its trigger see compressed kernel modules and retries it while the driver loads.",
            "1.19.1 generates cdiVersion 0.7.0 specs by default, which podman 4.9 cannot read.",
        ),
        source="CHANGELOG v1.18.1 (PR #1496: 'Fix trigger of CDI refresh service', 'Fix containerd drop-in config path'); "
        "release notes 1.18.2 (compressed kernels, restart logic); NVIDIA/cloud-native-docs PR #419 and "
        "NVIDIA/nvidia-container-toolkit issue #1860 (1.19.1 known issue: CDI spec v0.7.0)",
    ),
    _R1200,
    replace(
        _R1200,
        first=(1, 20, 1),
        last=None,
        notes=(
            "-base also ships the udev rule 99-nvidia-cdi-refresh.rules (deb: /lib/udev/rules.d, rpm: "
            "/usr/lib/udev/rules.d): loading the nvidia (or Debian's nvidia_current) module starts "
            "nvidia-cdi-refresh.service, which first creates the control device nodes, so the spec is "
            "refreshed when the driver loads even where the units are not enabled.",
        ),
        source="NVIDIA/nvidia-container-toolkit commit 8269969f67c6e59e01982d2d586ae10483cb61e2 'Create NVIDIA "
        "control device nodes in nvidia-cdi-refresh.service' (deployments/udev/99-nvidia-cdi-refresh.rules; "
        "packaging/debian/nvidia-container-toolkit-base.install and the rpm spec's %{_udevrulesdir}), after "
        "the v1.20.0 tag (not in it) and in the tree at d34b3046758cb1a5db606b2a39519c731bbf9f56, so first in the "
        "release after 1.20.0, 1.20.1 (our from-source 1.20.0-1 build of that tree in tests/data/nvidia-from-source "
        "carries it too); the units as in 1.20.0",
        refresh_udev_rule_dirs=("/lib/udev/rules.d", "/usr/lib/udev/rules.d"),
    ),
)

_VERSION = re.compile(r"^(?:\d+:)?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Optional[Version]:
    """The upstream ``(major, minor, patch)`` of a package version (``1.20.0-1``, ``1.18.0~rc.1-1``); None if none.

    A pre-release (``~rc``) counts as its release: its packaging is the release's.
    """
    match = _VERSION.match(text.strip())
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def release_for(version: str) -> Optional[ToolkitRelease]:
    """The row of the table that covers ``version`` (a package version); None when it is not a version."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    for row in RELEASES:
        if parsed < row.first:
            return row  # older than every row: the oldest behaviour we know
        if row.last is None or parsed <= row.last:
            return row
    return RELEASES[-1]
