"""Errors specific to the connected side (downloads, the mirror on disk, lockfiles).

Each is a :class:`~configure.errors.ToolError` whose ``str()`` is one sentence a user can act on;
``installer.cli.run`` prints it and exits with the class's :class:`~configure.errors.ExitCode`.
"""

from __future__ import annotations

from collections.abc import Sequence

from configure.errors import ExitCode, ToolError


class FetchError(ToolError):
    """A download failed: an HTTP error status, or a connection problem after every retry."""

    exit_code = ExitCode.NETWORK

    def __init__(self, url: str, status: int | None, detail: str = "") -> None:
        self.url = url
        self.status = status
        self.detail = detail
        if status is not None:
            reason = f"the server answered HTTP {status}"
        else:
            reason = f"the connection failed ({detail})" if detail else "the connection failed"
        extra = f" ({detail})" if status is not None and detail else ""
        super().__init__(f"could not download {url}: {reason}{extra}")


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
