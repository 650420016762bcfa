"""What can go wrong talking to a registry, each a one-sentence :class:`~plumbing.errors.ToolError`.

Exit codes (docs/reference.md, "Exit codes"): a refused login, a missing repository, tag or blob, or a request
the registry rejects is 1; a registry that cannot be reached (after retries) or whose TLS
certificate is not trusted is 4 (NETWORK); a blob or manifest whose bytes do not match the digest
that names them is 3 (VERIFICATION_FAILED), like any other integrity failure.
"""

from __future__ import annotations

from plumbing.errors import ExitCode, ToolError, VerificationError


class RegistryError(ToolError):
    """The registry answered, but not with what we asked for."""


class RegistryAuthError(RegistryError):
    """The registry (or its token service) wants credentials, refused them, or denied the access."""


class RegistryNotFound(RegistryError):
    """The repository, tag, digest or blob does not exist in the registry."""


class RegistryUnreachable(ToolError):
    """No usable answer from the registry: connection, TLS or server failures after the retries."""

    exit_code = ExitCode.NETWORK


class DigestMismatch(VerificationError):
    """Bytes from the registry do not match the digest (or size) that names them."""
