"""Which key the mirror trusts: NVIDIA's, shipped inside the package and pinned, or the one it recorded.

Any other key must be named explicitly by the caller (``--keyring FILE``); then no pin applies,
because the operator chose that key on purpose. A sync records the key it verified with in the
mirror's ``state.json`` (:mod:`mirror.sync.origin`), and :func:`keyring_for` gives every later
command (``sync``, ``status``, ``list``, ``publish --preserve-upstream``) that key again.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from mirror.disk.store import MirrorState
from mirror.errors import MirrorStateError
from plumbing.errors import ToolError
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


#: where a choice came from, as ``--json`` names it
FLAG, LOCKFILE, RECORDED, DEFAULT = "flag", "lockfile", "mirror", "default"
_SAID = {LOCKFILE: "from the lockfile", RECORDED: "recorded in the mirror", DEFAULT: "the default"}


@dataclass(frozen=True)
class Chosen:
    """One choice and where it came from (:data:`FLAG`, :data:`LOCKFILE`, :data:`RECORDED` or :data:`DEFAULT`)."""

    value: str
    source: str

    def said(self, flag: str) -> str:
        """``URL (recorded in the mirror)``; ``flag`` names the option when it was given."""
        return f"{self.value} ({_SAID.get(self.source, flag)})"


@dataclass(frozen=True)
class UpstreamKey:
    """The keyring a sync or status verifies upstream with, where it came from, and what the mirror keeps of it."""

    ring: Keyring
    source: str
    armored: str  #: the keys the operator named, armored; empty for NVIDIA's built-in key

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The primary keys of the keyring, sorted."""
        return tuple(sorted(self.ring.fingerprints))

    @property
    def chosen(self) -> Chosen:
        """The fingerprints as a choice, for messages and ``--json``."""
        return Chosen(", ".join(self.fingerprints), self.source)


@contextlib.contextmanager
def keyring_for(flag: Path | None, recorded: MirrorState | None) -> Iterator[UpstreamKey]:
    """The keyring to verify upstream with: ``--keyring`` > the key the mirror recorded > NVIDIA's built-in key.

    :raises MirrorStateError: when the key the mirror holds is not the one its fingerprints name.
    """
    if flag is not None:
        with open_keyring([flag]) as ring:
            yield UpstreamKey(ring, FLAG, _export(ring))
        return
    if recorded is None or not recorded.key:
        source = RECORDED if recorded is not None and recorded.key_fingerprints else DEFAULT
        with open_keyring(None) as ring:
            yield UpstreamKey(ring, source, "")
        return
    with tempfile.TemporaryDirectory(prefix="gpu-airgap-key-") as tmp:
        path = Path(tmp) / "upstream-key.asc"
        path.write_text(recorded.key, encoding="ascii")
        try:
            ring = open_keyring([path])
        except ToolError as exc:  # it names the temporary file: say what it is instead
            raise MirrorStateError(
                "the mirror", "the upstream key its state.json records is not a key; pass --keyring"
            ) from exc
        with ring:
            if ring.fingerprints != frozenset(recorded.key_fingerprints):
                raise MirrorStateError(
                    "the mirror",
                    "the upstream key its state.json holds is not the one it records; pass --keyring",
                )
            yield UpstreamKey(ring, RECORDED, recorded.key)


def _export(ring: Keyring) -> str:
    return "".join(ring.export(fpr).decode("ascii") for fpr in sorted(ring.fingerprints))
