"""Decode configuration bytes once, with the one error message every engine uses."""

from __future__ import annotations

from plumbing.errors import ConfigFormatError


def decode_utf8(raw: bytes, path: object) -> str:
    """Decode ``raw`` (the bytes of ``path``) as UTF-8.

    :raises ConfigFormatError: when the file is not UTF-8 text.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFormatError(path, "is not UTF-8 text") from exc
