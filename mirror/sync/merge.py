"""The mirror's next state: what a sync resolved, merged into what the mirror held.

:func:`new_state` is pure: :mod:`mirror.sync.core` passes it the planned targets, the previous state
and the indexes kept for held releases, and commits what it returns in the same switch as the
metadata, so ``state.json`` and the indexes it records never disagree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timezone

from mirror.disk import store
from mirror.model import Package
from mirror.release.versions import sort_key
from mirror.sync.targets import PlannedTarget, ReleasePlan, SyncOptions


def new_state(
    options: SyncOptions,
    planned: Sequence[PlannedTarget],
    previous: store.MirrorState | None,
    retained: dict[str, store.RepoProvenance],
) -> store.MirrorState:
    """Merge what this sync resolved into the previous state: releases accumulate until pruned.

    :param retained: by repo key, the replaced index kept for held releases the new one no longer lists.
    """
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    repos = {r.key: r for r in previous.repos} if previous else {}
    for item in planned:
        old = repos.get(item.key)
        packages = {p.path: p for p in old.packages} if old else {}
        for pkg in item.held:
            path = item.path(pkg)
            packages[path] = stored_package(path, pkg, item.url(pkg))
        offered = (
            ReleasePlan(item.toolkit_version, item.packages, item.node_requirements, item.breaks),
            *item.other_releases,
        )
        new = {r.toolkit_version for r in offered}
        releases = [r for r in (old.releases if old else ()) if r.toolkit_version not in new]
        releases += [
            store.Release(
                toolkit_version=r.toolkit_version,
                packages=tuple(item.path(p) for p in r.packages),
                node_requirements=r.node_requirements,
                breaks=r.breaks,
            )
            for r in offered
        ]
        releases.sort(key=lambda r, fmt=item.target.format: sort_key(fmt)(r.toolkit_version))  # type: ignore[misc]
        signed = (
            tuple(
                store.StoredFile(path=p, size=len(d), sha512=_sha512(d))
                for p, d in sorted(item.metadata.items())
            )
            + item.extra_metadata
        )
        repos[item.key] = store.RepoRecord(
            key=item.key,
            format=item.target.format.value,
            arch=item.target.arch,
            channel=options.channel,
            base_url=item.base_url,
            provenance=store.RepoProvenance(item.fingerprint, item.signed_at, signed, item.dated),
            retained=((retained[item.key],) if item.key in retained else ()) + (old.retained if old else ()),
            packages=tuple(sorted(packages.values(), key=lambda p: p.path)),
            releases=tuple(releases),
            synced_at=now,
        )
    keep = previous if previous is not None and not options.key_fingerprints else None
    return store.MirrorState(
        upstream=options.upstream,
        channel=options.channel,
        repos=tuple(sorted(repos.values(), key=lambda r: r.key)),
        selector=options.selector if options.locked is None else "locked",
        key_fingerprints=keep.key_fingerprints if keep else options.key_fingerprints,
        key=keep.key if keep else options.key,
    )


def stored_package(path: str, pkg: Package, url: str) -> store.StoredPackage:
    """The state's record of ``pkg``, held at ``path`` under the mirror and fetched from ``url``."""
    return store.StoredPackage(
        path=path,
        size=pkg.size,
        sha256=pkg.sha256,
        sha512=pkg.sha512,
        name=pkg.name,
        version=pkg.version,
        arch=pkg.arch,
        url=url,
    )


def _sha512(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest()
