"""Turn a signed bundle into the installer's :class:`~installer.target.StagedBundle`.

:func:`open_verified` is the real :class:`~installer.env.BundleOpener`: it verifies the bundle with
:func:`installer.bundle.extract_verified` against exactly the operator key file given (a throwaway
gpg home, nothing else trusted) and only then reads the manifest it verified.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, Optional, Tuple

from installer.bundle import VerifiedBundle, extract_verified
from installer.freshness import Policy
from installer.manifest import Manifest, PackageEntry
from installer.nodecheck import MISSING_NOTE, has_node_check
from installer.target import Requirement, StagedBundle, StagedPackage, StagedTarget
from plumbing.gpg import Keyring
from plumbing.progress import Meter

#: Breaks of the toolkit packages, identical in every upstream version (NVIDIA's Packages index, tests/data/real-upstream).
#: Only a fallback for bundles whose manifest predates the per-package ``breaks`` field.
KNOWN_BREAKS: Dict[str, Tuple[Requirement, ...]] = {
    "nvidia-container-toolkit": (
        Requirement("nvidia-container-runtime", "<=", "3.5.0-1"),
        Requirement("nvidia-container-runtime-hook"),
    ),
    "nvidia-container-toolkit-base": (
        Requirement("nvidia-container-runtime", "<=", "3.5.0-1"),
        Requirement("nvidia-container-runtime-hook"),
        Requirement("nvidia-container-toolkit", "<=", "1.10.0-1"),
    ),
}


def bundle_id(manifest: Manifest) -> str:
    """The sha256 of the manifest's canonical bytes, which are exactly the bytes the operator signed."""
    return hashlib.sha256(manifest.to_json()).hexdigest()


def staged_from_verified(verified: VerifiedBundle) -> StagedBundle:
    """Describe a verified, extracted bundle as the installer's records."""
    manifest = verified.manifest
    targets = []
    for target in manifest.targets:
        packages = tuple(
            StagedPackage(
                name=pkg.name,
                version=pkg.version,
                arch=pkg.arch,
                path=verified.path_of(pkg.file),
                size=pkg.size,
                depends=pkg.depends,
                breaks=_breaks(pkg),
                file_digest_algo=pkg.file_digest_algo,
            )
            for pkg in target.packages
        )
        requirements = tuple(Requirement.parse(text) for text in target.node_requirements)
        targets.append(StagedTarget(target.name, target.format, target.arch, packages, requirements))
    return StagedBundle(
        bundle_id=bundle_id(manifest),
        signer=verified.signer,
        release=manifest.toolkit_version,
        targets=tuple(targets),
        staging_dir=verified.root,
        notes=() if has_node_check(manifest) else (MISSING_NOTE,),
        created=manifest.created,
        channel=manifest.channel,
        expires=manifest.expires,
    )


def _breaks(pkg: PackageEntry) -> Tuple[Requirement, ...]:
    """The package's Breaks as the signed manifest states them, else the known upstream ones."""
    if pkg.breaks is None:
        return KNOWN_BREAKS.get(pkg.name, ())
    return tuple(Requirement.parse(text) for text in pkg.breaks)


def open_verified(
    bundle: Path,
    keyring: Path,
    staging_dir: Path,
    meter: Optional[Meter] = None,
    *,
    fingerprint: Optional[str] = None,
    policy: Optional[Policy] = None,
) -> StagedBundle:
    """Verify ``bundle`` with the key in ``keyring`` (or the one ``fingerprint`` pins) and extract it below ``staging_dir``.

    :raises UsageError: the key file holds several keys and ``fingerprint`` pins none of them.
    :raises VerificationError: a bad or missing signature, a key that is not the signer's, any
        member whose size or sha256 differs from the manifest, or an expired bundle ``policy`` does
        not allow (nothing is left in ``staging_dir``).
    """
    with Keyring.open_signer(keyring, fingerprint=fingerprint) as trusted:
        verified = extract_verified(bundle, trusted, staging_dir, meter, policy)
    return staged_from_verified(verified)
