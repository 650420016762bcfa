"""Errors of the connected side's metadata core: malformed signed indexes, selectors, unresolvable sets.

Signature, checksum and path errors live in :mod:`configure.errors` because the node side raises
them too; download and mirror-state errors live in ``mirror.errors`` (the sync code's). These are
only raised on the mirror host, by the metadata and resolution modules.
"""

from __future__ import annotations

from configure.errors import ExitCode, ToolError, UsageError, VerificationError


class MetadataError(VerificationError):
    """Signed (or checksum-verified) metadata is empty, malformed, or lacks what we need.

    A validly signed but empty InRelease is one of these, never "a repository with zero packages".
    """

    def __init__(self, what: str, detail: str) -> None:
        self.what = what
        self.detail = detail
        super().__init__(f"{what} {detail}")


class SelectorError(UsageError):
    """A ``--version`` value that is not ``latest``, a version, a wildcard or a range."""

    def __init__(self, text: str, detail: str) -> None:
        self.text = text
        self.detail = detail
        super().__init__(f"invalid version selector {text!r}: {detail}")


class UnresolvableDependency(ToolError):
    """No package in the repository satisfies a constraint of the selected release."""

    exit_code = ExitCode.UNRESOLVABLE

    def __init__(self, package: str, constraint: str, detail: str = "") -> None:
        self.package = package
        self.constraint = constraint
        self.detail = detail
        tail = f" ({detail})" if detail else ""
        super().__init__(
            f"cannot satisfy {constraint!s} required by {package}: no matching package in the repository{tail}"
        )

