"""Where a mirror syncs from: its upstream URL and the key upstream's metadata must be signed with.

A sync records both in the mirror's ``state.json`` (``upstream``, ``key_fingerprints`` and, for a
key the operator named with ``--keyring``, the armored key itself), so a re-sync needs neither flag
and ``mirror status`` checks upstream with the key the mirror was verified with. Each is chosen in
this order: the flag, the lockfile (its ``upstream =``), the mirror's record, the default
(NVIDIA's URL and built-in key).

Switching either under a mirror that already holds repos is refused unless ``--replace-upstream``
says so: the repos synced before keep their old provenance, and a mirror of two upstreams or two
keys reports itself fine while its bundles and status checks disagree with it.
"""

from __future__ import annotations

from pathlib import Path

from mirror.disk.store import MirrorState, state_path
from mirror.disk.trust import DEFAULT, FLAG, LOCKFILE, RECORDED, Chosen, UpstreamKey
from mirror.release.lockfile import Lockfile
from mirror.sync.targets import DEFAULT_UPSTREAM
from plumbing.errors import UsageError


class UpstreamSwitch(UsageError):
    """A sync would switch an existing mirror to another upstream or key without ``--replace-upstream``."""


def same_url(a: str, b: str) -> bool:
    """True when two upstream base URLs name the same place (a trailing slash aside)."""
    return a.rstrip("/") == b.rstrip("/")


def choose_upstream(flag: str | None, lock: Lockfile | None, recorded: MirrorState | None) -> Chosen:
    """The upstream to sync from: ``--upstream`` > the lockfile's ``upstream =`` > the mirror's > NVIDIA's."""
    if flag:
        return Chosen(flag, FLAG)
    if lock is not None and lock.upstream:
        return Chosen(lock.upstream, LOCKFILE)
    if recorded is not None and recorded.upstream:
        return Chosen(recorded.upstream, RECORDED)
    return Chosen(DEFAULT_UPSTREAM, DEFAULT)


def recorded_state(dest: Path) -> MirrorState | None:
    """The state of mirror ``dest``, or None when it holds no mirror yet (a first sync)."""
    # a damaged state is reported by the load, not taken for a new mirror
    return MirrorState.load(dest) if state_path(dest).exists() else None


def recorded_keys(state: MirrorState) -> frozenset[str]:
    """The keys the mirror was verified with: as recorded, else (an older mirror) who signed its repos."""
    if state.key_fingerprints:
        return frozenset(state.key_fingerprints)
    return frozenset(r.provenance.fingerprint for r in state.repos if r.provenance.fingerprint)


def check_switch(
    dest: Path,
    previous: MirrorState | None,
    upstream: str,
    keys: frozenset[str],
    *,
    replace: bool,
) -> list[str]:
    """Refuse a sync that would switch ``dest`` to another upstream or key, unless ``replace``.

    :param keys: the fingerprints of the keyring this sync verifies with (empty: not checked).
    :returns: with ``replace``, every repo the mirror holds from the replaced upstream or key.
    :raises UpstreamSwitch: when the upstream or key differs from the recorded one and ``replace`` is false.
    """
    if previous is None or not previous.repos:
        return []
    old_keys = recorded_keys(previous)
    url_differs = not same_url(previous.upstream, upstream)
    if previous.key_fingerprints:
        key_differs = bool(keys) and keys != old_keys
    else:  # an older mirror: only who signed its repos is known
        key_differs = bool(keys) and not old_keys <= keys
    if not (url_differs or key_differs):
        return []
    if not replace:
        was = f"{previous.upstream} (key {', '.join(sorted(old_keys)) or 'unknown'})"
        now = f"{upstream} (key {', '.join(sorted(keys)) or 'unknown'})"
        # a mirror synced before the key was recorded has only fingerprints: its key file must be named again
        keep = (
            "drop --upstream/--keyring to sync from the recorded ones"
            if previous.key_fingerprints
            else "pass --keyring with the key file it was synced with"
        )
        raise UpstreamSwitch(
            f"the mirror {dest} was synced from {was} and this sync would use {now}: pass --replace-upstream "
            f"to switch it, or {keep}"
        )
    return [r.key for r in previous.repos]


def check_lock_keys(lock: Lockfile | None, key: UpstreamKey) -> None:
    """Refuse a ``--locked`` sync whose keyring lacks a key the lockfile says upstream signed with.

    Without this, the sync would fetch upstream's index and fail on its signature, naming no key.

    :raises UsageError: naming the lockfile's key and where the keyring came from.
    """
    wanted = (
        sorted({t.key_fingerprint for t in lock.targets} - key.ring.fingerprints) if lock is not None else []
    )
    if wanted:
        raise UsageError(
            f"the lockfile's packages are signed by key {', '.join(wanted)}, which the keyring "
            f"{key.chosen.said('--keyring')} does not hold: pass --keyring with that key"
        )
