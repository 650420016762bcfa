"""The one exception root of gpu-airgap and the exit codes the CLI maps errors to.

Every error a user can see is a :class:`ToolError` whose ``str()`` is one sentence they can act
on. Library exceptions (OSError, subprocess, gnupg, requests, tomlkit) are turned into these at
the module that owns the side effect. ``cli`` is the only place that prints them.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from enum import IntEnum
from typing import Optional, Union


class ExitCode(IntEnum):
    """Process exit codes, documented in docs/reference.md ("Exit codes")."""

    OK = 0
    ERROR = 1  #: any other failure
    USAGE = 2  #: bad command line (click's own code)
    VERIFICATION_FAILED = 3  #: a signature, checksum or size did not match
    NETWORK = 4  #: a download failed after its retries
    CONFIG = 5  #: a configuration file is invalid or cannot be changed safely
    UNRESOLVABLE = 6  #: no package set satisfies the version and dependency constraints
    PREFLIGHT = 7  #: the node does not meet the bundle's requirements
    BUSY = 8  #: another gpu-airgap process holds the lock
    PROBLEMS_FOUND = 9  #: a check (verify, status) found problems and listed them
    NO_SPACE = 10  #: the disk (or its inodes, or the user's quota) ran out; nothing was changed
    ENGINE_RESTORED = (
        11  #: an engine did not come back after the change; its previous configuration was put back
    )
    NOT_ROOT = 12  #: the command changes files only root may write, and this user is not root


class ToolError(Exception):
    """Root of every error gpu-airgap reports; ``str()`` is one sentence for the user."""

    exit_code: ExitCode = ExitCode.ERROR


class UsageError(ToolError):
    """Options that cannot work together or a value the command cannot use."""

    exit_code = ExitCode.USAGE


class NotRoot(ToolError):
    """The command would write a file only root may write; nothing was changed."""

    exit_code = ExitCode.NOT_ROOT

    def __init__(self, path: object, user: str) -> None:
        self.path = str(path)
        super().__init__(
            f"must run as root: {self.path} is not writable by {user}; run the command as root "
            "(sudo), or give --root a directory you own"
        )


class ConfigFormatError(ToolError):
    """A configuration file could not be parsed or is not the shape we can edit."""

    exit_code = ExitCode.CONFIG

    def __init__(self, path: object, detail: str) -> None:
        self.path = str(path)
        self.detail = detail
        super().__init__(f"{self.path}: {detail}")


class FileWriteError(ToolError):
    """A file could not be written (a read-only file or directory, a full disk, a path that is not a directory).

    :func:`plumbing.fsutil.atomic_write` raises it for every file; a caller that writes a
    configuration file turns it into :class:`ConfigFormatError` (exit 5) where that is what failed.
    """

    def __init__(self, path: object, detail: str) -> None:
        self.path = str(path)
        self.detail = detail
        super().__init__(f"{self.path}: {detail}")


class NoSpaceError(ToolError):
    """A write failed because the filesystem is full (bytes or inodes) or a quota is exhausted.

    Whoever raises it has left everything as it was (or, for a sync, kept its verified downloads
    for the next run); ``outcome`` says so in the user's terms.
    """

    exit_code = ExitCode.NO_SPACE
    ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
    UNCHANGED = "nothing was changed"

    def __init__(self, path: object, outcome: str = UNCHANGED) -> None:
        self.path = str(path)
        self.outcome = outcome
        super().__init__(
            f"no space left on the device while writing {self.path}; {outcome}: "
            "free space (or inodes) there and run the command again"
        )

    @classmethod
    def matches(cls, exc: BaseException) -> bool:
        """True when ``exc`` (or what it was raised from) is a full disk or an exhausted quota."""
        seen: set[int] = set()
        current: Optional[BaseException] = exc
        while current is not None and id(current) not in seen:
            if isinstance(current, cls) or (isinstance(current, OSError) and current.errno in cls.ERRNOS):
                return True
            seen.add(id(current))
            current = current.__cause__ or current.__context__
        return False

    @classmethod
    def of(
        cls, exc: BaseException, path: Union[str, os.PathLike[str]], outcome: str = UNCHANGED
    ) -> NoSpaceError:
        """The one-sentence error for ``exc`` (which :meth:`matches`) with ``outcome``, naming the file it names (else ``path``)."""
        where = exc.path if isinstance(exc, cls) else getattr(exc, "filename", None) or path
        return cls(where, outcome)


class CommandError(ToolError):
    """An external command (dpkg, rpm, gpg, containerd, ...) failed."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(
            f"{self.argv[0]} exited with status {returncode}: {_telling_line(self.argv[0], stderr)}"
        )


def _telling_line(program: str, stderr: str) -> str:
    """The stderr line that says what went wrong: the last ``<prog>: error`` line, else the last line.

    Tools like dpkg end with hints ("Note: root's PATH should usually contain ...") after the error.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "no error output"
    name = program.rsplit("/", 1)[-1]
    errors = [line for line in lines if line.startswith((f"{name}: error", "error:", "E: "))]
    return errors[-1] if errors else lines[-1]


class VerificationError(ToolError):
    """A signature, checksum or size check failed."""

    exit_code = ExitCode.VERIFICATION_FAILED


class SignatureError(VerificationError):
    """A signature is missing, bad, or made by a key we were not told to trust."""


class ChecksumMismatch(VerificationError):
    """Bytes on disk or on the wire do not match the digest the signed metadata names."""

    def __init__(self, what: str, expected: str, actual: str) -> None:
        self.what = what
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{what} does not match its signed checksum (expected {expected[:16]}…, got {actual[:16]}…)"
        )


class UnsafePathError(VerificationError):
    """A path from metadata or an archive would land outside the directory it belongs to."""

    def __init__(self, path: str, root: object) -> None:
        self.path = path
        self.root = str(root)
        super().__init__(f"refusing path {path!r}: it would land outside {self.root}")


class BusyError(ToolError):
    """Another process holds the lock on a mirror or node state."""

    exit_code = ExitCode.BUSY


class ProblemsFound(ToolError):
    """A check found one or more problems; ``problems`` lists every one of them."""

    exit_code = ExitCode.PROBLEMS_FOUND

    def __init__(self, summary: str, problems: Sequence[str]) -> None:
        self.summary = summary
        self.problems = list(problems)
        super().__init__(f"{summary}: " + "; ".join(self.problems))


class ManagedByOperator(ToolError):
    """Someone else (the NVIDIA GPU Operator) manages the runtime's registration on this node."""

    exit_code = ExitCode.CONFIG

    def __init__(self, owner: str, evidence: str) -> None:
        self.owner = owner
        self.evidence = evidence
        super().__init__(
            f"the NVIDIA runtime on this node is managed by {owner} ({evidence}); change it through {owner}, "
            "or pass --force to take the configuration over"
        )
