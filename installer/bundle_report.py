"""What checking a bundle found: the report ``bundle verify`` prints and the error a failed check raises.

:mod:`installer.bundle` fills a :class:`BundleVerifyReport` as it streams a bundle; besides the
problems it carries what the signed manifest says about the bundle itself (channel, build time and
age, expiry: :mod:`installer.freshness`). Node side: python3.9-compatible, stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional

from installer import freshness
from installer.manifest import MANIFEST_NAME, Manifest
from plumbing.errors import VerificationError


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a bundle, tied to the member it concerns."""

    member: str
    message: str

    def __str__(self) -> str:
        return f"{self.member}: {self.message}"


@dataclass
class BundleVerifyReport:
    """The outcome of :func:`verify`: who signed, what was checked, and every problem found."""

    path: str
    signer: Optional[str] = None
    manifest: Optional[Manifest] = None
    members_checked: int = 0
    bytes_checked: int = 0
    problems: List[Problem] = field(default_factory=list)
    #: the bundle carries the node check (``NODE-SHA256SUMS``); False: an older build without it
    node_check: bool = False
    now: datetime = field(default_factory=freshness.utc_now)  #: the clock the age and expiry were judged by

    @property
    def ok(self) -> bool:
        """True when the signature and every member checked out."""
        return not self.problems and self.signer is not None

    @property
    def first_bad(self) -> Optional[str]:
        """The first member found bad, in archive order."""
        return self.problems[0].member if self.problems else None

    def to_dict(self) -> Dict[str, object]:
        """JSON-ready form for ``--json``."""
        return {
            "bundle": self.path,
            "ok": self.ok,
            "signer": self.signer,
            "members_checked": self.members_checked,
            "bytes_checked": self.bytes_checked,
            "first_bad_member": self.first_bad,
            "node_check": self.node_check,
            **self.facts(),
            "problems": [{"member": p.member, "message": p.message} for p in self.problems],
        }

    def facts(self) -> Dict[str, object]:
        """What the signed manifest says about the bundle itself: channel, build time and age, expiry."""
        manifest = self.manifest
        if manifest is None:
            return {}
        return {
            "channel": manifest.channel,
            "release_candidate": manifest.channel == "experimental",
            "created": manifest.created,
            "age": freshness.age_text(manifest.created, self.now),
            "expires": manifest.expires,
        }

    def raise_for_problems(self, *, listed: bool = False) -> None:
        """Raise :class:`BundleVerificationError` unless the bundle verified.

        :param listed: the caller has already shown every problem (``bundle verify``).
        """
        if not self.ok:
            raise BundleVerificationError(self, listed=listed)


class BundleVerificationError(VerificationError):
    """A bundle failed verification; names the first bad member and carries every problem."""

    def __init__(self, report: BundleVerifyReport, *, listed: bool = False) -> None:
        self.report = report
        problems = report.problems or [Problem(MANIFEST_NAME, "no valid signature")]
        where = "listed above" if listed else "run `gpu-airgap bundle verify` to list them"
        more = f" ({len(problems) - 1} more problem(s): {where})" if len(problems) > 1 else ""
        super().__init__(f"bundle {Path(report.path).name} failed verification at {problems[0]}{more}")
