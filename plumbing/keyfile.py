"""What a key file is and which key a ``--fingerprint`` names: read from the bytes, no gpg needed.

Every command that takes ``--keyring`` refuses a file that cannot be a key with one sentence
(:func:`check_key_file`, :func:`not_a_key`); ``bundle inspect`` names an OpenPGP file given where
a bundle belongs (:func:`openpgp_kind`); ``--fingerprint`` is read one way everywhere
(:func:`parse_fingerprint`). :mod:`plumbing.gpg` verifies with the keys. Node side:
python3.9-compatible, stdlib only.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Optional, Union

from plumbing.errors import UsageError
from plumbing.fsutil import file_type

FINGERPRINT_RE = re.compile(r"^[0-9A-F]{40}$")  #: a full OpenPGP v4 fingerprint, upper case


def check_key_file(path: Union[str, os.PathLike[str]]) -> None:
    """Refuse a ``--keyring`` that is not a key file, saying what it is (every command taking a key calls this).

    :raises UsageError: when ``path`` is missing, a directory, a device such as ``/dev/null``, a pipe or
        socket, or an empty file.
    """
    try:
        info = Path(path).stat()
    except FileNotFoundError:
        raise UsageError(f"the key file {path} does not exist") from None
    except OSError as exc:
        raise UsageError(f"cannot read the key file {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(
            f"the key file {path} is {file_type(info.st_mode)}, not a public key file (gpg --export KEY > FILE)"
        )
    if info.st_size == 0:
        raise UsageError(f"the key file {path} is empty, not a public key (gpg --export KEY > FILE)")


def _is_keybox(head: bytes) -> bool:
    """True when ``head`` begins a gpg keybox (``pubring.kbx``): its first blob's magic, at byte 8."""
    return head[8:12] == b"KBXf"


#: what an armored OpenPGP file says it is, by its first line
_ARMOR_KINDS = (
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----", "an OpenPGP key"),
    (b"-----BEGIN PGP PRIVATE KEY BLOCK-----", "an OpenPGP secret key"),
    (b"-----BEGIN PGP SIGNATURE-----", "an OpenPGP signature"),
    (b"-----BEGIN PGP SIGNED MESSAGE-----", "an OpenPGP signed message"),
)


def openpgp_kind(head: bytes) -> Optional[str]:
    """What OpenPGP file the first bytes ``head`` (64 are enough) begin, as a phrase, or None.

    For a file given where a bundle is expected (``bundle inspect operator.asc``): armor, a binary
    public key (packet tag 6, old or new format) or a gpg keybox.
    """
    text = head.lstrip()
    for armor, kind in _ARMOR_KINDS:
        if text.startswith(armor):
            return kind
    if _is_keybox(head):
        return "a gpg keybox (pubring.kbx)"
    first = head[0] if head else 0
    old_format_key = first & 0xC0 == 0x80 and (first >> 2) & 0x0F == 6
    new_format_key = first == 0xC6
    if (old_format_key or new_format_key) and len(head) > 3 and 4 in head[1:4]:  # a version-4 key packet
        return "an OpenPGP key"
    return None


def not_a_key(path: Union[str, os.PathLike[str]], data: bytes) -> UsageError:
    """The refusal of a ``--keyring`` file gpg found no key in; a gpg keybox is named, with the export that helps."""
    if _is_keybox(data):
        return UsageError(
            f"the key file {path} is a gpg keybox (pubring.kbx), not a public key file; export the key from it: "
            f"gpg --no-default-keyring --keyring {path} --export KEY > operator.gpg"
        )
    return UsageError(f"the key file {path} holds no OpenPGP public key (gpg --export KEY > FILE)")


def parse_fingerprint(value: str) -> str:
    """A ``--fingerprint`` value as 40 upper-case hex digits (spaces and a ``0x`` prefix allowed).

    :raises UsageError: for anything else, a short or long key id included (ids can collide; a fingerprint cannot).
    """
    text = value.replace(" ", "").upper()
    text = text[2:] if text.startswith("0X") else text
    if not FINGERPRINT_RE.match(text):
        raise UsageError(
            f"--fingerprint {value!r} is not a full 40-hex-digit fingerprint (a key id can be forged); "
            "`gpg --show-keys --with-fingerprint KEYFILE` shows it"
        )
    return text
