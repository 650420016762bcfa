"""Which key the mirror trusts by default: NVIDIA's, shipped inside the package and pinned.

Any other key must be named explicitly by the caller (``--keyring FILE``); then no pin applies,
because the operator chose that key on purpose.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Final

from plumbing.gpg import Keyring

#: Primary key of "NVIDIA CORPORATION (Open Source Projects) <cudatools@nvidia.com>", RSA 4096, no expiry.
NVIDIA_FINGERPRINT: Final = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


def default_keyring_path() -> Path:
    """Path of NVIDIA's public key as shipped in ``mirror/data/``."""
    return Path(str(resources.files("mirror") / "data" / "nvidia-container-toolkit.gpgkey.asc"))


def open_keyring(paths: list[str | os.PathLike[str]] | None = None) -> Keyring:
    """Open the keyring to verify upstream metadata with.

    :param paths: key files the operator named; ``None`` means NVIDIA's shipped key, which must
        match :data:`NVIDIA_FINGERPRINT` (a tampered package data file is refused).
    :raises SignatureError: when the shipped key is not the pinned one, or a file holds no key.
    """
    if paths:
        return Keyring.open(paths)
    return Keyring.open([default_keyring_path()], pinned_fingerprint=NVIDIA_FINGERPRINT)
