"""The one architecture table: each architecture NVIDIA publishes, spelled the apt way and the rpm way.

apt says ``amd64``/``arm64``/``ppc64el``, rpm (and ``uname -m``) ``x86_64``/``aarch64``/``ppc64le``.
Commands accept either spelling; mirrors, bundles and nodes use the spelling of their package
format. NVIDIA's CUDA repositories name 64-bit Arm servers ``sbsa`` (``.../repos/ubuntu2404/sbsa/``,
``.../repos/rhel9/sbsa/``) while the packages inside say ``arm64``/``aarch64``, so ``sbsa`` is
accepted as a third spelling of that one architecture and mapped to the package format's own.
(A CUDA repository directory named ``arm64``, as ``ubuntu2004/arm64/``, holds Jetson packages; the
directory name is not the package arch there, so a CUDA source maps directories itself.)
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from plumbing.errors import UsageError

#: apt name -> rpm name
DEB_TO_RPM_ARCH: Dict[str, str] = {"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le"}
#: rpm name -> apt name
RPM_TO_DEB_ARCH: Dict[str, str] = {rpm: deb for deb, rpm in DEB_TO_RPM_ARCH.items()}
#: other names of an architecture -> its apt name (NVIDIA's CUDA repository directories)
ARCH_ALIASES: Dict[str, str] = {"sbsa": "arm64"}
#: every spelling we know, apt names first
KNOWN_ARCHES: Tuple[str, ...] = (*DEB_TO_RPM_ARCH, *RPM_TO_DEB_ARCH, *ARCH_ALIASES)


def normalize_arch(arch: str, package_format: Optional[str]) -> str:
    """Spell ``arch`` the way ``package_format`` (``deb`` or ``rpm``) does; an unknown arch is kept as it is.

    >>> normalize_arch("x86_64", "deb")
    'amd64'
    >>> normalize_arch("sbsa", "rpm")
    'aarch64'
    """
    arch = arch.strip()
    arch = ARCH_ALIASES.get(arch, arch)
    if package_format == "rpm":
        return DEB_TO_RPM_ARCH.get(arch, arch)
    return RPM_TO_DEB_ARCH.get(arch, arch)


def known_arch(arch: str) -> str:
    """Return ``arch`` when it is one NVIDIA publishes (either spelling).

    :raises UsageError: for any other architecture.
    """
    if arch not in KNOWN_ARCHES:
        raise UsageError(f"unknown architecture {arch!r}; use one of {', '.join(sorted(KNOWN_ARCHES))}")
    return arch
