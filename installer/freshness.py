"""How old a bundle is, whether it expired, whether it is a release candidate, and whether it is older than the node's.

Every fact comes from the signed manifest, read only after its signature checked out: ``created``
is the build time (SOURCE_DATE_EPOCH when the operator set it) and orders the builds of one release,
``expires`` the optional end of its life (``bundle build --expires``), ``channel`` the upstream
channel (``experimental`` carries release candidates). The clock is passed in (``now``) so tests
pick the day; :func:`utc_now` is the real one. Node side: python3.9-compatible, stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

from plumbing.errors import UsageError, VerificationError

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_DURATION = re.compile(r"^([1-9][0-9]{0,5})([mhdw])$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: the one line build, verify, install and status print for a bundle of the experimental channel
RELEASE_CANDIDATE_NOTE = (
    "release candidate: this bundle is of NVIDIA's experimental channel, which is not for production"
)


class BundleExpired(VerificationError):
    """The signed manifest's ``expires`` is past and ``--allow-expired`` was not given (exit 3)."""


class BundleOlderThanInstalled(VerificationError):
    """The bundle was built before the one the node has for the same release (exit 3)."""


def utc_now() -> datetime:
    """The real clock (UTC); callers take ``now`` as a parameter so tests can set the day."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Policy:
    """What a reader lets through besides a good signature, and the clock it judges age and expiry by."""

    allow_expired: bool = False  #: ``--allow-expired``
    now: Optional[datetime] = None  #: None: the real clock

    def clock(self) -> datetime:
        """``now``, else the real time."""
        return self.now or utc_now()


def parse_duration(text: str) -> timedelta:
    """``--expires`` values: ``90m``, ``12h``, ``30d``, ``8w``.

    :raises UsageError: for anything else.
    """
    match = _DURATION.match(text.strip())
    if match is None:
        raise UsageError(
            f"--expires {text!r} is not a duration like 12h, 30d or 8w (m, h, d or w after a number)"
        )
    return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def format_time(moment: datetime) -> str:
    """The manifest's spelling of a time: ``2026-12-04T16:00:00Z``."""
    return moment.astimezone(timezone.utc).strftime(TIME_FORMAT)


def parse_time(text: Optional[str]) -> Optional[datetime]:
    """A manifest time, or None when absent or not in :data:`TIME_FORMAT`."""
    if not text:
        return None
    try:
        return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def span(delta: timedelta) -> str:
    """A rounded-down length of time in words: ``3 days``, ``5 hours``, ``1 minute``."""
    seconds = int(abs(delta.total_seconds()))
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return "less than a minute"


def age_text(created: Optional[str], now: datetime) -> str:
    """``built 3 days ago (2026-12-01T10:00:00Z)``; a build time ahead of the clock is said so."""
    built = parse_time(created)
    if built is None:
        return "build time unknown"
    if built > now + timedelta(minutes=5):
        return f"built {created}, {span(built - now)} ahead of this machine's clock"
    return f"built {span(now - built)} ago ({created})"


def expiry_problem(created: Optional[str], expires: Optional[str], now: datetime) -> Optional[str]:
    """The sentence refusing an expired bundle, or None when it has no expiry or has not reached it."""
    end = parse_time(expires)
    if end is None or now < end:
        return None
    return (
        f"the bundle expired {span(now - end)} ago ({expires}; {age_text(created, now)}); "
        "ask the operator for a fresh bundle, or pass --allow-expired to install it anyway"
    )


def expiry_text(expires: Optional[str], now: datetime) -> str:
    """``expires in 29 days (…)``, ``expired 2 days ago (…)`` or ``no expiry``."""
    end = parse_time(expires)
    if end is None:
        return "no expiry"
    if now < end:
        return f"expires in {span(end - now)} ({expires})"
    return f"expired {span(now - end)} ago ({expires})"


def check_build_sequence(
    release: str,
    created: str,
    installed_release: Optional[str],
    installed_built: Optional[str],
    *,
    allow: bool,
) -> None:
    """Refuse a bundle of the node's release built before the bundle the node has (a replayed older build).

    :param installed_built: the recorded build time of the installed bundle ("" or None: not recorded).
    :raises BundleOlderThanInstalled: unless ``allow`` (``--allow-downgrade``).
    """
    built, installed = parse_time(created), parse_time(installed_built)
    if allow or release != installed_release or built is None or installed is None or built >= installed:
        return
    raise BundleOlderThanInstalled(
        f"this bundle of release {release} was built {created}, {span(installed - built)} before the bundle "
        f"installed here ({installed_built}); an older build may be a replay, so pass --allow-downgrade "
        "to install it anyway"
    )
