"""The operator's signing key, used through the real gpg in the operator's GNUPGHOME.

The embedded repositories' signatures (``InRelease``, ``repomd.xml.asc``) are members whose
hashes the manifest lists, so for two builds to be byte-identical they are made with gpg's clock
set to SOURCE_DATE_EPOCH (``--faked-system-time``): RSA and EdDSA signatures are deterministic for
a fixed creation time. ``manifest.json.asc`` is always made at the real time.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from plumbing.errors import CommandError, ToolError, UsageError
from plumbing.proc import run


@dataclass(frozen=True)
class OperatorKey:
    """A secret key in a GNUPGHOME; ``fingerprint`` is the primary key's."""

    key_id: str
    gnupghome: Path | None
    fingerprint: str

    @classmethod
    def find(cls, key_id: str, gnupghome: Path | None) -> OperatorKey:
        """Look up the secret key ``key_id``.

        :raises UsageError: when no secret key, or more than one, matches (exit 2: the option names the wrong key).
        """
        where = gnupghome or "~/.gnupg"
        try:
            out = _gpg(gnupghome, "--with-colons", "--list-secret-keys", "--", key_id, what=f"key {key_id}")
        except GpgFailed:  # gpg exits 2 for a key it does not have: the option names the wrong key
            out = b""
        fprs: list[str] = []
        lines = out.decode("utf-8", "replace").splitlines()
        for index, line in enumerate(lines):
            if line.startswith("sec:") and index + 1 < len(lines) and lines[index + 1].startswith("fpr:"):
                fprs.append(lines[index + 1].split(":")[9])
        if not fprs:
            raise UsageError(
                f"--sign-key {key_id} is not a secret key in {where} (`gpg --list-secret-keys` lists the keys there)"
            )
        if len(fprs) > 1:
            raise UsageError(
                f"--sign-key {key_id} matches {len(fprs)} secret keys in {where}; name exactly one"
            )
        return cls(key_id, gnupghome, fprs[0])

    def sign_detached(self, data: bytes, *, at: int | None = None) -> bytes:
        """Armored detached signature over ``data`` (at time ``at`` when given)."""
        return self._sign(data, "--detach-sign", at=at)

    def clearsign(self, text: bytes, *, at: int | None = None) -> bytes:
        """Cleartext-signed message of ``text`` (an InRelease)."""
        return self._sign(text, "--clearsign", at=at)

    def public_key(self) -> bytes:
        """The armored public key (shipped in the bundle for information only)."""
        return _gpg(self.gnupghome, "--armor", "--export", self.fingerprint, what=f"key {self.fingerprint}")

    def _sign(self, data: bytes, mode: str, *, at: int | None) -> bytes:
        args = ["--local-user", self.fingerprint, "--digest-algo", "SHA512", "--armor", mode]
        if at is not None:
            args = ["--faked-system-time", f"{at}!", *args]
        return _gpg(self.gnupghome, *args, data=data, what=f"signing with {self.fingerprint}")


@dataclass(frozen=True)
class SigningKeys:
    """The operator key(s) a bundle is signed with: one, or two during a key rotation (``--sign-key`` twice).

    Detached signatures are the armored signatures of every key, one after the other: gpg and gpgv
    read each block, and a node that holds either key finds a good signature by it.
    """

    keys: tuple[OperatorKey, ...]

    @classmethod
    def find(cls, key_ids: Sequence[str], gnupghome: Path | None) -> SigningKeys:
        """Look up every ``--sign-key``.

        :raises UsageError: for a key that is not there, or one key named twice.
        """
        keys = tuple(OperatorKey.find(key_id, gnupghome) for key_id in key_ids)
        if not keys:
            raise UsageError("name the operator's secret key with --sign-key")
        fingerprints = [key.fingerprint for key in keys]
        twice = sorted({fpr for fpr in fingerprints if fingerprints.count(fpr) > 1})
        if twice:
            raise UsageError(f"--sign-key names key {', '.join(twice)} twice; name each key once")
        return cls(keys)

    @property
    def primary(self) -> OperatorKey:
        """The first ``--sign-key``: the manifest's ``signer``, and the key of the embedded repositories."""
        return self.keys[0]

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """Every signing key's fingerprint, in ``--sign-key`` order."""
        return tuple(key.fingerprint for key in self.keys)

    def sign_detached(self, data: bytes, *, at: int | None = None) -> bytes:
        """Every key's armored detached signature over ``data``, concatenated."""
        return b"".join(key.sign_detached(data, at=at) for key in self.keys)

    def public_key(self) -> bytes:
        """Every key's armored public key, concatenated (shipped in the bundle for information only)."""
        return b"".join(key.public_key() for key in self.keys)


class GpgFailed(ToolError):
    """gpg could not list, export or sign (exit 1: signing is not verifying, whose failures are exit 3)."""


def _gpg(gnupghome: Path | None, *args: str, data: bytes | None = None, what: str) -> bytes:
    argv = ["gpg", "--batch", "--yes", "--quiet", "--no-tty", "--pinentry-mode", "loopback"]
    if gnupghome is not None:
        argv += ["--homedir", str(gnupghome)]
    try:
        return run([*argv, *args], input_bytes=data if data is not None else b"", timeout=300).stdout
    except CommandError as exc:
        hint = (
            exc.stderr.strip().splitlines()[-1] if exc.stderr.strip() else f"gpg exited with {exc.returncode}"
        )
        if "in the future" in exc.stderr:
            hint += " (SOURCE_DATE_EPOCH is older than the signing key; use a later SOURCE_DATE_EPOCH)"
        elif "can't get input" in exc.stderr or "No passphrase given" in exc.stderr:
            raise locked_key(what.rpartition(" ")[2], gnupghome) from exc
        # signing, not verifying: a failure here is no verification failure (exit 3)
        raise GpgFailed(f"gpg failed for {what}: {hint}") from exc


def locked_key(key: str, gnupghome: Path | None) -> UsageError:
    """The refusal of a ``--sign-key`` whose passphrase gpg, in batch mode, cannot ask for (exit 2, like a missing key).

    gpg-agent keeps a passphrase it asked for once, so the hint unlocks the key in a terminal, in the
    same gpg home the build reads (``--gnupghome``).
    """
    home = f"--homedir {shlex.quote(str(gnupghome))} " if gnupghome is not None else ""
    return UsageError(
        f"the signing key {key} is protected by a passphrase, which gpg cannot ask for in batch mode; unlock it "
        f"once in a terminal (export GPG_TTY=$(tty); gpg {home}-u {key} --clearsign < /dev/null > /dev/null), "
        "then run again"
    )
