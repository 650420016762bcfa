"""The node side's one module that talks to gpg: verify clearsigned and detached signatures.

Verification always happens in an isolated, temporary ``GNUPGHOME`` that holds only the keys the
caller names (:class:`Keyring`), never the user's keyring, so "valid" can only mean "made by one
of these keys". We read gpg's machine-readable status lines (``--status-fd``) ourselves and
require a ``VALIDSIG`` whose primary-key fingerprint is in the keyring; ``BADSIG``, revoked or
expired keys, and signatures by other keys are :class:`~plumbing.errors.SignatureError`.

:func:`Keyring.verify_clearsigned` returns exactly the text gpg verified (``gpg --decrypt`` of the
cleartext message, dash-unescaped), canonicalised the way the signature hash sees it: CRLF becomes
LF and trailing spaces/tabs are dropped (RFC 4880 §7.1 ignores them, so keeping them would let an
attacker change bytes without breaking the signature). Anything outside the one signed block is
rejected before gpg runs, so junk or a second signed message cannot smuggle text in.

Signing happens only on the connected host, with the operator's key (:mod:`mirror.signing.key`).

Node side: python3.9-compatible, stdlib + python-gnupg only.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Optional, Union

import gnupg

from plumbing.errors import SignatureError, ToolError, UsageError
from plumbing.keyfile import FINGERPRINT_RE, check_key_file, not_a_key, parse_fingerprint

_BEGIN_SIGNED = b"-----BEGIN PGP SIGNED MESSAGE-----"
_BEGIN_SIG = b"-----BEGIN PGP SIGNATURE-----"
_END_SIG = b"-----END PGP SIGNATURE-----"
#: Status keywords that make a verification fail even if another signature is good.
_FATAL_STATUS = ("BADSIG", "REVKEYSIG", "EXPKEYSIG")
#: OpenPGP hash algorithm ids (RFC 4880 9.4) too weak to trust a signature made with them, whatever
#: the gpg at hand thinks (Debian 12's gpg and gpgv 2.2.40 still accept SHA-1 data signatures).
WEAK_DIGESTS = {"1": "MD5", "2": "SHA-1", "3": "RIPEMD-160"}


@dataclass(frozen=True)
class Verification:
    """The outcome of a good signature check."""

    fingerprint: str  #: primary-key fingerprint (40 hex digits, upper case) of the signer
    signed_at: Optional[datetime]  #: signature creation time (UTC), when gpg reports it


@dataclass(frozen=True)
class VerifiedText:
    """The text a clearsigned message signs, as verified, plus who signed it and when."""

    text: str
    fingerprint: str
    signed_at: Optional[datetime]


class Keyring:
    """A throwaway gpg home holding only the given public keys; use as a context manager.

    Example::

        with Keyring.open([Path("nvidia.asc")], pinned_fingerprint=NVIDIA_FPR) as keyring:
            verified = keyring.verify_clearsigned(inrelease_bytes)
    """

    def __init__(self, home: Path, gpg: gnupg.GPG, fingerprints: frozenset[str]) -> None:
        """Wrap an already-populated gpg home; use :meth:`open` instead."""
        self._home = home
        self._gpg = gpg
        self.fingerprints = fingerprints  #: primary-key fingerprints in this keyring

    @classmethod
    def open(
        cls,
        paths: Sequence[Union[str, os.PathLike[str]]],
        *,
        pinned_fingerprint: Optional[str] = None,
    ) -> Keyring:
        """Import the armored or binary key files ``paths`` into a fresh temporary gpg home.

        :param paths: public key files (``gpg --export`` output, armored or not).
        :param pinned_fingerprint: when given, the keyring must hold exactly this primary key.
        :raises UsageError: when a path is not a key file at all (:func:`check_key_file`) or holds no key.
        :raises SignatureError: when the pinned fingerprint does not match.
        :raises ToolError: when a key file cannot be read or gpg is missing.
        """
        if not paths:
            raise SignatureError("no keyring was given to verify signatures with")
        home = Path(tempfile.mkdtemp(prefix="gpu-airgap-gnupg-"))
        try:
            # Public-key work needs no gpg-agent or dirmngr; without this, importing starts an
            # agent that outlives the temporary home.
            gpg = _new_gpg(home, ["--no-autostart"])
            imported: set[str] = set()
            for path in paths:
                check_key_file(path)
                try:
                    data = Path(path).read_bytes()
                except OSError as exc:
                    raise ToolError(f"cannot read keyring {path}: {exc.strerror or exc}") from exc
                result = gpg.import_keys(data)
                if not result.fingerprints:
                    raise not_a_key(path, data)
                # IMPORT_OK names each primary key imported, so no second gpg run lists the home
                imported.update(str(fpr).upper() for fpr in result.fingerprints)
            fingerprints = frozenset(imported)
            if pinned_fingerprint is not None:
                pinned = _normalise_fpr(pinned_fingerprint)
                if fingerprints != {pinned}:
                    found = ", ".join(sorted(fingerprints)) or "none"
                    raise SignatureError(
                        f"the keyring holds key {found}, not the pinned key {pinned}; pass the key you trust explicitly"
                    )
        except BaseException:
            shutil.rmtree(home, ignore_errors=True)
            raise
        return cls(home, gpg, fingerprints)

    @classmethod
    def open_signer(cls, path: Union[str, os.PathLike[str]], *, fingerprint: Optional[str] = None) -> Keyring:
        """The operator's key file as a keyring trusting exactly one key (``--keyring`` / ``--fingerprint``).

        A file holding several keys is refused unless ``fingerprint`` names one of them; then only that
        key is trusted, so a signature by another key of the file does not count.

        :param fingerprint: the full 40-hex-digit fingerprint of the key to trust (spaces allowed).
        :raises UsageError: for a short key id, a pin the file does not hold, or several keys and no pin.
        """
        pinned = None if fingerprint is None else parse_fingerprint(fingerprint)
        keyring = cls.open([path])
        held = ", ".join(sorted(keyring.fingerprints))
        if pinned is not None and pinned not in keyring.fingerprints:
            keyring.close()
            raise UsageError(
                f"the key file {path} does not hold the key --fingerprint {pinned} names; it holds {held}"
            )
        if pinned is None and len(keyring.fingerprints) > 1:
            keyring.close()
            raise UsageError(
                f"the key file {path} holds {len(keyring.fingerprints)} keys ({held}) and gpu-airgap trusts one: "
                "pass --fingerprint with the full fingerprint of the operator key you trust"
            )
        keyring.fingerprints = frozenset({pinned}) if pinned is not None else keyring.fingerprints
        return keyring

    def close(self) -> None:
        """Delete the temporary gpg home."""
        shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self) -> Keyring:
        """Return self; the home is deleted on exit."""
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        """Delete the temporary gpg home."""
        self.close()

    def verify_clearsigned(self, data: bytes, *, what: str = "clearsigned message") -> VerifiedText:
        """Verify a cleartext-signed message (an ``InRelease``) and return the text it signs.

        :param data: the whole message as fetched.
        :param what: how to name the message in errors (a URL or file name).
        :raises SignatureError: when the framing is not exactly one signed block, or the
            signature is bad or not made by a key in this keyring.
        """
        _check_clearsigned_framing(data, what)
        result = self._gpg.decrypt(data, extra_args=["--no-auto-key-retrieve"])
        verification = self._judge(result.stderr, what)
        try:
            text = result.data.decode("utf-8", "strict") if result.data else ""
        except UnicodeDecodeError as exc:
            raise SignatureError(f"the signed text of {what} is not UTF-8 ({exc.reason})") from exc
        return VerifiedText(_canonical_text(text), verification.fingerprint, verification.signed_at)

    def verify_detached(self, data: bytes, signature: bytes, *, what: str = "data") -> Verification:
        """Verify a detached signature (``repomd.xml.asc``) over ``data``.

        :param data: the signed bytes exactly as fetched.
        :param signature: the armored or binary detached signature.
        :param what: how to name the data in errors.
        :raises SignatureError: when the signature is bad, not detached, or not by a key in this keyring.
        """
        if _BEGIN_SIGNED in signature:
            raise SignatureError(f"the signature for {what} is a signed message, not a detached signature")
        fd, sig_path = tempfile.mkstemp(prefix="sig-", dir=self._home)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(signature)
            result = self._gpg.verify_data(sig_path, data, extra_args=["--no-auto-key-retrieve"])
        finally:
            Path(sig_path).unlink()
        return self._judge(result.stderr, what)

    def export(self, fingerprint: str) -> bytes:
        """The armored public key ``fingerprint`` as this keyring holds it (``mirror publish`` serves it).

        :raises SignatureError: when the keyring does not hold that key.
        """
        if _normalise_fpr(fingerprint) not in self.fingerprints:
            raise SignatureError(f"the keyring does not hold key {fingerprint}")
        return str(self._gpg.export_keys(_normalise_fpr(fingerprint))).encode("ascii")

    def _judge(self, stderr: str, what: str) -> Verification:
        return judge_status(_status_lines(stderr), self.fingerprints, what)


def judge_status(status: Iterable[tuple[str, list[str]]], trusted: frozenset[str], what: str) -> Verification:
    """Decide from gpg status lines whether ``what`` carries a good signature by a trusted key.

    Pure so it can be table-tested. Policy (apt's): any BADSIG or signature by a revoked or expired
    key fails; otherwise at least one VALIDSIG whose primary fingerprint is trusted is required, made
    with a digest not in :data:`WEAK_DIGESTS` (a weak one does not count, whatever gpg says). A
    signature by a key the keyring does not hold (``ERRSIG``, a second signer during a key rotation)
    is no failure when a trusted one is good.

    :param status: ``(keyword, args)`` pairs from ``--status-fd``.
    :param trusted: primary-key fingerprints of the keyring.
    :param what: how to name the signed object in errors.
    :raises SignatureError: when the policy is not met.
    """
    good: list[Verification] = []
    unknown_keys: list[str] = []
    untrusted: list[str] = []
    weak: list[tuple[str, str]] = []
    seen_signature = False
    for keyword, args in status:
        if keyword in _FATAL_STATUS:
            key = args[0] if args else "unknown"
            reason = {
                "BADSIG": "a bad signature",
                "REVKEYSIG": "a revoked key",
                "EXPKEYSIG": "an expired key",
            }
            raise SignatureError(
                f"{what} has {reason[keyword]} from key {key}; it may have been tampered with"
            )
        if keyword in ("NEWSIG", "GOODSIG", "ERRSIG", "VALIDSIG"):
            seen_signature = True
        if keyword == "ERRSIG" and args:
            # a gpg that refuses a weak digest itself says ERRSIG (field 3 the hash algorithm, 6 not 9: the key is there)
            algo = WEAK_DIGESTS.get(args[2]) if len(args) > 5 and args[5] != "9" else None
            # field 7 is the issuer's full fingerprint when the signature carries it (gpg >= 2.2.7): shown
            # as everywhere else, rather than the 16-hex key id of field 1
            signer = args[6].upper() if len(args) > 6 and FINGERPRINT_RE.match(args[6].upper()) else args[0]
            if algo:
                weak.append((algo, signer))
            else:
                unknown_keys.append(signer)
        elif keyword == "VALIDSIG" and len(args) >= 2:
            primary = (args[9] if len(args) >= 10 else args[0]).upper()
            digest = args[7] if len(args) > 7 else ""
            if primary in trusted and digest in WEAK_DIGESTS:
                weak.append((WEAK_DIGESTS[digest], primary))
            elif primary in trusted:
                good.append(Verification(primary, _parse_sig_time(args[2] if len(args) > 2 else "")))
            else:
                untrusted.append(primary)
    if good:
        return good[0]
    if weak:
        algo, key = weak[0]
        raise SignatureError(
            f"{what} is signed with {algo} by key {key}, a digest too weak to trust; "
            "re-sign it with SHA-256 or stronger (gpg --digest-algo SHA512)"
        )
    if unknown_keys or untrusted:
        keys = ", ".join(unknown_keys + untrusted)
        raise SignatureError(f"{what} is signed by key {keys}, which is not in the trusted keyring")
    if not seen_signature:
        raise SignatureError(f"{what} carries no OpenPGP signature gpg could read")
    raise SignatureError(f"{what} has no valid signature from the trusted keyring")


def _new_gpg(home: Path, options: Optional[list[str]] = None) -> gnupg.GPG:
    try:
        return gnupg.GPG(gnupghome=str(home), options=options)
    except (OSError, ValueError) as exc:
        raise ToolError(f"gpg is not installed or not usable: {exc}") from exc


def _check_clearsigned_framing(data: bytes, what: str) -> None:
    """Refuse anything but one signed block with nothing but whitespace around it.

    Lines of the signed text that start with '-' are dash-escaped ("- -----BEGIN"), so counting
    armor lines at the start of a line is exact.
    """
    lines = data.replace(b"\r\n", b"\n").split(b"\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise SignatureError(f"{what} is empty, not a signed message")
    if lines[first].rstrip() != _BEGIN_SIGNED:
        raise SignatureError(
            f"{what} does not start with a PGP signed-message header; refusing unsigned text"
        )
    counts = {marker: 0 for marker in (_BEGIN_SIGNED, _BEGIN_SIG, _END_SIG)}
    end_index = -1
    for index, line in enumerate(lines):
        stripped = line.rstrip()
        if stripped.startswith(b"-----") and stripped not in counts:
            raise SignatureError(f"{what} contains an unexpected armor line {stripped[:40]!r}")
        if stripped in counts:
            counts[stripped] += 1
            if stripped == _END_SIG:
                end_index = index
    if any(count != 1 for count in counts.values()):
        raise SignatureError(f"{what} must contain exactly one signed block and one signature block")
    if any(line.strip() for line in lines[end_index + 1 :]):
        raise SignatureError(f"{what} has data after its signature block; refusing it")


def _canonical_text(text: str) -> str:
    # What the signature hash covers: line endings normalised, trailing spaces/tabs ignored.
    return "\n".join(line.rstrip(" \t\r") for line in text.split("\n"))


def _status_lines(stderr: str) -> list[tuple[str, list[str]]]:
    out = []
    for line in stderr.splitlines():
        if line.startswith("[GNUPG:] "):
            parts = line[9:].split()
            if parts:
                out.append((parts[0], parts[1:]))
    return out


def _parse_sig_time(value: str) -> Optional[datetime]:
    if value.isdigit():
        return datetime.fromtimestamp(int(value), tz=timezone.utc)
    try:
        return datetime.strptime(value, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _normalise_fpr(value: str) -> str:
    fpr = value.replace(" ", "").upper()
    if not FINGERPRINT_RE.match(fpr):
        raise SignatureError(f"{value!r} is not a 40-hex-digit OpenPGP fingerprint")
    return fpr
