"""Which system a node runs, the package manager it uses, and whether gpu-airgap supports it.

The table is the systems NVIDIA publishes the toolkit for and we test against fixtures of their real
``/etc/os-release`` (``tests/data/fixtures/os-release``): Ubuntu and Debian with apt over dpkg; RHEL,
Rocky Linux, AlmaLinux and Amazon Linux 2023 with dnf over rpm. Any other system is named with one
sentence and the install goes ahead: dpkg or rpm decides whether the packages fit, as they would
for ``apt install ./*.deb``. Pure: built from the parsed os-release and the package format found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

#: os-release ID -> (the name we show, supported release numbers, package manager)
SUPPORTED: Dict[str, Tuple[str, Tuple[str, ...], str]] = {
    "ubuntu": ("Ubuntu", ("20.04", "22.04", "24.04"), "apt"),
    "debian": ("Debian", ("11", "12", "13"), "apt"),
    "rhel": ("RHEL", ("8", "9", "10"), "dnf"),
    "rocky": ("Rocky Linux", ("8", "9", "10"), "dnf"),
    "almalinux": ("AlmaLinux", ("8", "9", "10"), "dnf"),
    "amzn": ("Amazon Linux", ("2023",), "dnf"),
}
#: os-release ID or ID_LIKE word -> the package manager of that family
_FAMILIES: Tuple[Tuple[str, str], ...] = (
    ("debian", "apt"),
    ("ubuntu", "apt"),
    ("suse", "zypper"),
    ("opensuse", "zypper"),
    ("rhel", "dnf"),
    ("fedora", "dnf"),
    ("centos", "dnf"),
    ("amzn", "dnf"),
)


@dataclass(frozen=True)
class NodeSystem:
    """The node's system as preflight names it."""

    name: str  #: ``Ubuntu 24.04``, ``Rocky Linux 9``, or the os-release NAME and VERSION_ID of another
    package_manager: Optional[str]  #: apt, dnf, yum, zypper; None when neither the table nor the family says
    supported: bool

    def label(self) -> str:
        """``Ubuntu 24.04 (apt)``, ``CentOS Linux 7 (yum, not supported)``."""
        details = [self.package_manager or "no package manager known"]
        if not self.supported:
            details.append("not supported")
        return f"{self.name} ({', '.join(details)})"

    def unsupported_note(self) -> Optional[str]:
        """One sentence for a system outside the table, or None for a supported one."""
        if self.supported:
            return None
        return (
            f"{self.name} is not a system gpu-airgap supports ({supported_list()}); the install goes ahead "
            "and dpkg or rpm decides whether the packages fit"
        )


def release_of(os_id: str, version_id: str) -> str:
    """The release number the table lists: Ubuntu's ``24.04`` as it is, everyone else's major (``9.6`` -> ``9``)."""
    return version_id if os_id == "ubuntu" else version_id.split(".")[0]


def identify(
    os_id: str, id_like: Sequence[str], version_id: str, name: str, package_format: Optional[str]
) -> NodeSystem:
    """Name the system of os-release ``ID``/``ID_LIKE``/``VERSION_ID``/``NAME``, its package manager and support.

    >>> identify("rocky", ("rhel", "centos", "fedora"), "9.3", "Rocky Linux", "rpm").label()
    'Rocky Linux 9 (dnf)'
    """
    release = release_of(os_id, version_id)
    known = SUPPORTED.get(os_id)
    if known is not None:
        shown, releases, manager = known
        if release not in releases:  # an older one may have another manager (RHEL 7, Amazon Linux 2: yum)
            manager = _family_manager(os_id, id_like, release, package_format) or manager
        return NodeSystem(f"{shown} {release}".strip(), manager, release in releases)
    shown = f"{name or os_id or 'an unknown system'} {version_id}".strip()
    return NodeSystem(shown, _family_manager(os_id, id_like, release, package_format), False)


def supported_list() -> str:
    """``supported: Ubuntu 20.04, 22.04, 24.04; Debian 11, 12, 13; …``."""
    return "supported: " + "; ".join(
        f"{shown} {', '.join(releases)}" for shown, releases, _ in SUPPORTED.values()
    )


def _family_manager(
    os_id: str, id_like: Sequence[str], release: str, package_format: Optional[str]
) -> Optional[str]:
    for word in (os_id, *id_like):
        for family, manager in _FAMILIES:
            if word == family:
                # EL 7 and older (CentOS 7, RHEL 7) and Amazon Linux 2 have yum, not dnf
                old = manager == "dnf" and release.isdigit() and (int(release) < 8 or os_id == "amzn")
                return "yum" if old else manager
    return {"deb": "dpkg", "rpm": "rpm"}.get(package_format or "")
