"""Throwaway OpenPGP keys for signature tests: real gpg, real keys.

The session fixtures made with :func:`make_key` (``test_key``, ``other_key``, ``operator_key``)
live in ``tests/conftest.py``.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from mirror.signing.key import OperatorKey

REAL = Path(__file__).parent / "data" / "real-upstream"
NVIDIA_KEY = REAL / "gpgkey"


@dataclass(frozen=True)
class TestKey:
    """A secret key in its own gpg home, and its exported public key file."""

    __test__ = False  # not a pytest class

    home: Path
    fingerprint: str
    public: Path

    def clearsign(self, text: str) -> bytes:
        """``text`` as a cleartext-signed message (an InRelease), made by the bundle builder's signer."""
        return OperatorKey(self.fingerprint, self.home, self.fingerprint).clearsign(text.encode("utf-8"))

    def export_binary(self, path: Path) -> Path:
        """Write the public key unarmored (``gpg --export``) to ``path``."""
        gpg = ["gpg", "--homedir", str(self.home), "--batch", "--export", self.fingerprint]
        path.write_bytes(subprocess.run(gpg, check=True, capture_output=True).stdout)
        return path

    def sign_detached(self, data: bytes) -> bytes:
        """An armored detached signature over ``data``, made by the bundle builder's signer."""
        return OperatorKey(self.fingerprint, self.home, self.fingerprint).sign_detached(data)


def make_key(home: Path, uid: str, *, created: int | None = None) -> TestKey:
    """Generate an unprotected ed25519 signing key in ``home`` and export its public half.

    :param created: the key's creation time (seconds since 1970), for builds with an older SOURCE_DATE_EPOCH.
    """
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
    at = [] if created is None else ["--faked-system-time", f"{created}!"]
    subprocess.run(
        [*gpg, *at, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
        check=True,
        capture_output=True,
    )
    listing = subprocess.run(
        [*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True
    )
    fingerprint = next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))
    public = home / "public.asc"
    public.write_bytes(
        subprocess.run([*gpg, "--armor", "--export", fingerprint], check=True, capture_output=True).stdout
    )
    return TestKey(home, fingerprint, public)
