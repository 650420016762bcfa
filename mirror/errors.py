"""Errors specific to the connected side: downloads, signed metadata, selection, the mirror on disk, lockfiles.

Signature, checksum and path errors live in :mod:`plumbing.errors` because the node side raises
them too; these are only raised on the mirror host.

Each is a :class:`~plumbing.errors.ToolError` whose ``str()`` is one sentence a user can act on;
``installer.cli.root.run`` prints it and exits with the class's :class:`~plumbing.errors.ExitCode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from plumbing.errors import ChecksumMismatch, ExitCode, ToolError, UsageError, VerificationError


class FetchError(ToolError):
    """A download failed: an HTTP error status, or a connection problem (after every retry, if it was worth one).

    ``str()`` is one sentence: the URL, what happened, how many attempts, and (for connection
    problems) what the user can check, e.g. ``could not download http://h/InRelease: the host name
    h does not resolve; check --upstream, ...``.
    """

    exit_code = ExitCode.NETWORK

    def __init__(
        self, url: str, status: int | None, detail: str = "", *, attempts: int = 1, hint: str = ""
    ) -> None:
        self.url = url
        self.status = status
        self.detail = detail
        self.attempts = attempts
        if status is not None:
            reason = f"the server answered HTTP {status}" + (f" {detail}" if detail else "")
        else:
            reason = detail or "the connection failed"
        tried = f" (tried {attempts} times)" if attempts > 1 else ""
        super().__init__(f"could not download {url}: {reason}{tried}" + (f"; {hint}" if hint else ""))


class MirrorStateError(ToolError):
    """The mirror's state file is missing, unreadable or from an unknown version."""

    def __init__(self, dest: object, detail: str) -> None:
        self.dest = str(dest)
        self.detail = detail
        super().__init__(f"{self.dest} is not a usable gpu-airgap mirror: {detail}")


class LockfileMismatch(ToolError):
    """``sync --locked`` could not reproduce the set the lockfile names; ``differences`` lists why."""

    exit_code = ExitCode.UNRESOLVABLE

    def __init__(self, path: object, differences: Sequence[str]) -> None:
        self.path = str(path)
        self.differences = list(differences)
        super().__init__(f"upstream no longer matches {self.path}: " + "; ".join(self.differences))


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


class PackageChangedError(ChecksumMismatch):
    """A mirror file no longer holds the bytes the mirror verified at sync time."""

    def __init__(self, path: Path, expected: str, actual: str) -> None:
        super().__init__(str(path), expected, actual)
        self.args = (
            f"{path} changed since the mirror verified it (expected {expected}, got {actual}); "
            "run `gpu-airgap mirror verify`, delete the damaged files and sync again",
        )


class HeaderMismatch(VerificationError):
    """A package's own header (control data, rpm header) disagrees with the signed index entry it was fetched for."""

    def __init__(self, what: str, index: str, detail: str) -> None:
        self.what = what
        self.index = index
        self.detail = detail
        super().__init__(
            f"{what} is not the package the signed {index} entry it was fetched for describes: {detail}"
        )


class UnreadablePackage(VerificationError):
    """A package file matched its signed digest but its header cannot be read."""

    def __init__(self, what: str, fmt: str, detail: str) -> None:
        self.what = what
        self.detail = detail
        super().__init__(f"{what} matches its signed digest but is not a readable .{fmt} ({detail})")
