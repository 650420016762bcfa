"""Is a verified upstream index at least as new as the one the mirror holds? Replay, freeze and withdrawal.

A signature proves who made an index, not that it is the latest one: an old, validly signed
``InRelease`` or ``repomd.xml`` (replayed by a mirror in the middle, a stale CDN copy, or a release
upstream withdrew) verifies just as well. NVIDIA's metadata says little about its age: its
``InRelease`` carries a frozen ``Date: Fri, 27 Apr 2018`` and no ``Valid-Until``, and its repomd
``revision`` is always ``1.0``. So a sync compares what it can, per repo, with what the mirror
recorded from the last sync:

- the index must still list every package of every release the mirror holds, with the same
  digests (this catches a replay of NVIDIA's metadata, whose dates never move);
- where an upstream dates its metadata, the date must not go backwards: the apt ``Date``, the
  repomd ``revision`` when it is a Unix time (createrepo's default), else the newest ``<timestamp>``
  of its data entries; and the signature's own creation time;
- a ``Valid-Until`` in the past is refused (the index expired);
- a ``Date`` more than :data:`CLOCK_SKEW` ahead of this host's clock is refused: recorded, it
  would make every honest index after it look older (fix the clock, or wait).

``--allow-older-index`` accepts an index that is older, expired, or no longer lists a held
release; the sync then keeps the index it replaces (:mod:`mirror.sync.core`) so every release the
mirror holds stays buildable. Pure functions: the caller passes the clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

from mirror.disk import store
from mirror.index.repo import clean_relative
from mirror.model import Package
from mirror.sync.targets import Snapshot
from plumbing.errors import UnsafePathError, VerificationError

#: how far ahead of this host's clock an index's own date may be before it is refused
CLOCK_SKEW = timedelta(hours=1)
ALLOW_FLAG = "--allow-older-index"


class StaleIndex(VerificationError):
    """A validly signed index that is older than the mirror's, expired, or dated in the future (exit 3)."""


@dataclass(frozen=True)
class IndexDates:
    """What an upstream's verified metadata says about its own age (None: it does not say)."""

    dated: datetime | None  #: apt ``Date``; yum revision (a Unix time) or newest data timestamp
    valid_until: datetime | None  #: apt ``Valid-Until``
    signed_at: datetime | None  #: the signature's creation time

    def recorded(self) -> str | None:
        """``dated`` as ``state.json`` keeps it (ISO 8601 UTC)."""
        return _iso(self.dated)


def checked_age(
    snapshot: Snapshot,
    key: str,
    base: str,
    previous: store.RepoRecord | None,
    *,
    now: datetime,
    allow_older: bool,
    kept_aside: frozenset[str] = frozenset(),
) -> tuple[IndexDates, tuple[str, ...]]:
    """The dates of the verified ``snapshot`` of repo ``key`` after the checks of this module, and
    the releases ``previous`` (what the mirror holds) has that it no longer lists.

    :param kept_aside: held releases the mirror's current index already did not list (an earlier
        ``--allow-older-index`` kept the index that does): not refused again.
    :raises StaleIndex: per the module docstring (``allow_older``: only for a future date).
    """
    release, repomd = getattr(snapshot, "release", None), getattr(snapshot, "repomd", None)
    dates = index_dates(
        release.fields if release is not None else None,
        repomd.revision if repomd is not None else None,
        [d.timestamp for d in repomd.data.values()] if repomd is not None else [],
        snapshot.signed_at,
    )
    what = f"the signed {base}/{'InRelease' if release is not None else 'repodata/repomd.xml'}"
    check_current(dates, now=now, what=what, allow_older=allow_older)
    if previous is None:
        return dates, ()
    missing = [
        (v, path)
        for v, path in missing_releases(previous, _listed(snapshot, key, base))
        if v not in kept_aside
    ]
    if not allow_older:
        check_not_older(previous.provenance, dates, missing, what=what)
    return dates, tuple(version for version, _ in missing)


def _listed(snapshot: Snapshot, key: str, base: str) -> dict[str, Package]:
    """Path under the mirror -> entry, for every package the index lists (names that escape skipped)."""
    listed: dict[str, Package] = {}
    for pkg in snapshot.packages:
        try:
            listed[f"{key}/{clean_relative(pkg.filename, base)}"] = pkg
        except UnsafePathError:
            continue  # refused if selected (plan_target); never a held package's path
    return listed


def index_dates(
    fields: dict[str, str] | None,
    revision: str | None,
    timestamps: Iterable[int | None],
    signed_at: datetime | None,
) -> IndexDates:
    """The dates of one verified index: the apt Release ``fields``, or a repomd ``revision`` and data ``timestamps``."""
    if fields is not None:
        return IndexDates(_rfc2822(fields.get("Date")), _rfc2822(fields.get("Valid-Until")), signed_at)
    stamps = [t for t in timestamps if t is not None]
    if revision is not None and revision.isdigit() and len(revision) >= 9:  # a Unix time, not "1.0"
        dated: datetime | None = _epoch(int(revision))
    else:
        dated = _epoch(max(stamps)) if stamps else None
    return IndexDates(dated, None, signed_at)


def check_current(dates: IndexDates, *, now: datetime, what: str, allow_older: bool) -> None:
    """Refuse an expired index (unless ``allow_older``) and one dated ahead of this host's clock.

    :raises StaleIndex: with the reason and what to do.
    """
    if dates.valid_until is not None and dates.valid_until < now and not allow_older:
        raise StaleIndex(
            f"{what} expired on {_iso(dates.valid_until)} (its Valid-Until): upstream stopped refreshing it, "
            f"or an old copy is being replayed; the mirror is unchanged ({ALLOW_FLAG} accepts it)"
        )
    if dates.dated is not None and dates.dated > now + CLOCK_SKEW:
        raise StaleIndex(
            f"{what} is dated {_iso(dates.dated)}, ahead of this host's clock ({_iso(now)}) by more than "
            f"{int(CLOCK_SKEW.total_seconds() // 60)} minutes: check this host's clock; the mirror is unchanged"
        )


def check_not_older(
    prov: store.RepoProvenance,
    dates: IndexDates,
    missing: list[tuple[str, str]],
    *,
    what: str,
) -> None:
    """Refuse an index dated before the one the mirror recorded (``prov``), or one that no longer lists a held release.

    :param missing: (release, a package path of it) the new index does not list, from :func:`missing_releases`.
    :raises StaleIndex: naming the date or the release, and the flag that accepts it.
    """
    for label, new, old in (
        ("timestamp" if what.endswith("repomd.xml") else "Date", dates.recorded(), prov.dated),
        ("signature", _iso(dates.signed_at), prov.signed_at),
    ):
        if new is not None and old is not None and _parse_iso(new) < _parse_iso(old):
            raise StaleIndex(
                f"{what} is older than the one the mirror holds ({label} {new}, the mirror's {old}): a replayed "
                f"or frozen index; the mirror is unchanged ({ALLOW_FLAG} accepts it)"
            )
    if missing:
        releases, gone = ", ".join(release for release, _ in missing), missing[0][1]
        raise StaleIndex(
            f"{what} no longer lists release {releases} that the mirror holds ({gone} is gone or changed): a "
            f"replayed older index or a withdrawn release; the mirror is unchanged ({ALLOW_FLAG} accepts it "
            f"and keeps {releases} buildable)"
        )


def missing_releases(record: store.RepoRecord, listed: dict[str, Package]) -> list[tuple[str, str]]:
    """(toolkit version, first package path) of each release in ``record`` that ``listed`` does not list as held."""
    missing: list[tuple[str, str]] = []
    stored = {p.path: p for p in record.packages}
    for release in record.releases:
        for path in release.packages:
            entry, held = listed.get(path), stored.get(path)
            if entry is None or not store.same_record(
                held, size=entry.size, sha256=entry.sha256, sha512=entry.sha512
            ):
                missing.append((release.toolkit_version, path))
                break
    return missing


def _rfc2822(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # an undated index: nothing to compare
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def _epoch(seconds: int) -> datetime | None:
    try:
        return datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds") if moment is not None else None


def _parse_iso(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
