"""NVIDIA's CUDA download repositories as an upstream: ``mirror sync --upstream cuda:<distro>/<arch>``.

``https://developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/`` is one repository per
distribution and arch (``ubuntu2204/x86_64``, ``ubuntu2404/sbsa``, ``rhel9/x86_64``…): a flat apt
repository (``InRelease``, ``Release`` + ``Release.gpg``, ``Packages``, ``Packages.gz`` at its root)
or a yum one (``repodata/repomd.xml`` + ``.asc``), as NVIDIA/cuda-repo-management describes them. Each
carries every non-experimental toolkit release among thousands of CUDA, driver and library
packages, and is signed with NVIDIA's CUDA keys, not the toolkit repository's:

* apt repositories: ``3bf863cc.pub``, fingerprint ``EB693B3035CD5710E231E123A4B469963BF863CC``
  (Debian 13 and later distributions use a newer key, ``8793F200``);
* yum repositories: ``D42D0685.pub``, fingerprint ``610C7B14E068A878070DA4E99CD0A493D42D0685``
  (both as NVIDIA/cuda-repo-management's SIGNATURES.md shows gpg printing them).

gpu-airgap ships neither key: the operator names the one fetched from the repository with
``--keyring``, and a key that is not one of these is warned about. Only the toolkit's chain is
taken: the index is filtered by package name while it is read, before anything is parsed into
records or resolved, so the thousands of other packages cost a line scan each.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from plumbing.errors import UsageError

PREFIX: Final = "cuda:"
REPOS: Final = "https://developer.download.nvidia.com/compute/cuda/repos"
#: the primary-key fingerprints NVIDIA signs its CUDA repositories with (apt, yum)
KEYS: Final = {
    "EB693B3035CD5710E231E123A4B469963BF863CC": "NVIDIA's CUDA apt key (3bf863cc)",
    "610C7B14E068A878070DA4E99CD0A493D42D0685": "NVIDIA's CUDA yum key (D42D0685)",
}
#: the packages a toolkit release may need or names in Breaks; everything else in a CUDA repository is skipped
TOOLKIT_CHAIN: Final = frozenset(
    {
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
        "nvidia-container-runtime",
        "nvidia-container-runtime-hook",
        "nvidia-docker2",
    }
)


def is_cuda(upstream: str) -> bool:
    """True when ``upstream`` names a CUDA repository (``cuda:ubuntu2204/x86_64`` or ``cuda:<URL>``)."""
    return upstream.startswith(PREFIX)


def base_url(upstream: str) -> str:
    """The repository's URL: ``cuda:<distro>/<arch>`` under NVIDIA's CUDA downloads, ``cuda:<URL>`` as given (a proxy)."""
    rest = upstream[len(PREFIX) :].rstrip("/")
    if "://" in rest:
        return rest
    return f"{REPOS}/{rest}"


def names_for(upstream: str) -> frozenset[str] | None:
    """The package names a sync from ``upstream`` reads: the toolkit's chain from a CUDA repository, else all."""
    return TOOLKIT_CHAIN if is_cuda(upstream) else None


def check_sync(upstream: str, targets: int, *, has_key: bool) -> None:
    """A CUDA repository is one format and arch, signed with a key gpu-airgap does not ship.

    :param has_key: ``--keyring`` was given, or the mirror recorded a key.
    :raises UsageError: for several targets, or no key.
    """
    if not is_cuda(upstream):
        return
    if targets != 1:
        raise UsageError(
            f"{upstream} is one repository (one format and arch): give one --format and one --arch"
        )
    if not has_key:
        raise UsageError(
            f"{upstream} is signed with NVIDIA's CUDA key, not the toolkit's: pass it with --keyring "
            "(the repository's 3bf863cc.pub for apt, D42D0685.pub for yum)"
        )


def key_warning(upstream: str, fingerprints: Collection[str]) -> str | None:
    """A warning when a CUDA repository is checked with a key that is none of NVIDIA's CUDA keys."""
    if not is_cuda(upstream) or set(fingerprints) & KEYS.keys():
        return None
    return (
        f"the key for {upstream} ({', '.join(sorted(fingerprints))}) is none of NVIDIA's CUDA keys "
        f"({', '.join(sorted(KEYS))}); make sure it is the one you meant"
    )
