"""Throwaway signing keys for the local upstream, made and used with the real gpg.

Each key lives in its own private GNUPGHOME (never the user's). Signatures use SHA512 and the
primary key, like NVIDIA's. gpg-agent is started on demand by gpg; :func:`stop_agent` ends the
agent of one home (only that one) so test runs do not leave daemons behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from plumbing.proc import run

_KEY_PARAMS = """\
%no-protection
Key-Type: RSA
Key-Length: 2048
Key-Usage: sign
Name-Real: {name}
Name-Email: {email}
Expire-Date: 0
%commit
"""


@dataclass(frozen=True)
class SigningKey:
    """A secret key in a private GNUPGHOME."""

    gnupghome: Path
    fingerprint: str

    def _gpg(self, *args: str, data: bytes | None = None) -> bytes:
        argv = ["gpg", "--homedir", str(self.gnupghome), "--batch", "--yes", "--quiet", *args]
        return run(argv, input_bytes=data, timeout=120).stdout

    def clearsign(self, body: bytes) -> bytes:
        """Return ``body`` as a cleartext-signed message (``Hash: SHA512``), like InRelease."""
        return self._gpg(
            "--local-user", self.fingerprint, "--digest-algo", "SHA512", "--clearsign", data=body
        )

    def sign_detached(self, data: bytes) -> bytes:
        """Return an armored detached binary signature of ``data`` (sigclass 0x00), like repomd.xml.asc."""
        return self._gpg(
            "--local-user", self.fingerprint, "--digest-algo", "SHA512", "--armor", "--detach-sign", data=data
        )

    def public_key_armored(self) -> bytes:
        """The armored public key, the content of the upstream ``gpgkey`` file."""
        return self._gpg("--armor", "--export", self.fingerprint)

    def public_key_binary(self) -> bytes:
        """The dearmored public key, what apt's ``signed-by=`` file holds."""
        return self._gpg("--export", self.fingerprint)


def generate_key(gnupghome: Path, *, name: str = "gpu-airgap test upstream (throwaway)") -> SigningKey:
    """Create a new RSA-2048 signing key without passphrase in the (new) directory ``gnupghome``.

    :param gnupghome: a directory that does not exist yet or is empty; it gets mode 0700.
    :param name: the user id's real name.
    """
    gnupghome.mkdir(parents=True, exist_ok=True)
    os.chmod(gnupghome, 0o700)
    email = "upstream@gpu-airgap.invalid"
    params = _KEY_PARAMS.format(name=name, email=email).encode()
    run(
        ["gpg", "--homedir", str(gnupghome), "--batch", "--quiet", "--gen-key"],
        input_bytes=params,
        timeout=120,
    )
    listing = run(
        ["gpg", "--homedir", str(gnupghome), "--batch", "--with-colons", "--list-secret-keys"]
    ).stdout
    fprs = [line.split(":")[9] for line in listing.decode().splitlines() if line.startswith("fpr:")]
    return SigningKey(gnupghome, fprs[-1])


def stop_agent(gnupghome: Path) -> None:
    """Stop the gpg-agent serving ``gnupghome`` (and only it), if one runs."""
    run(["gpgconf", "--homedir", str(gnupghome), "--kill", "gpg-agent"], check=False, timeout=30)
