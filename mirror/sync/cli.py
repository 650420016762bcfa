"""The sync wing's commands of the ``gpu-airgap mirror`` group: sync, plan, status, verify and prune.

:mod:`mirror.groups` puts them in the group, beside the publish wing's ``publish``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import click
import typer

from mirror.model import CHANNELS, PackageFormat
from mirror.release.lockfile import Lockfile
from mirror.release.versions import sort_key
from plumbing import output
from plumbing.clikit import refuse_with
from plumbing.errors import ProblemsFound, UsageError
from plumbing.rate import DEFAULT_MIN_RATE, WINDOW

# The mirror commands import their libraries (requests, rich progress, …) when they run, so
# other commands (bundle build, the node side) start without them.
if TYPE_CHECKING:
    from mirror.disk.store import MirrorState
    from mirror.disk.trust import Chosen
    from mirror.sync import core as sync_lib

#: Same value as mirror.sync.core.DEFAULT_UPSTREAM (tests/test_bundle_build_safety.py checks), spelled here so
#: building the group does not import mirror.sync.core.
DEFAULT_UPSTREAM = "https://nvidia.github.io/libnvidia-container"


def add_sync_commands(app: typer.Typer) -> None:
    """Register ``sync``, ``plan``, ``status``, ``verify`` and ``prune`` on the ``mirror`` group."""
    app.command("sync")(sync_command)
    app.command("plan")(plan_command)
    # the mirror they read is --mirror, as for bundle build and publish; --dest is for sync, which writes it
    app.command("status")(status_command)
    app.command("verify")(verify_command)
    app.command("prune")(prune_command)


# -- mirror commands ---------------------------------------------------------------------------
# Each command builds the collaborators, calls the library, and renders; no decisions here.

_DEST = typer.Option(..., "--dest", help="The mirror directory to write (created if missing).")
_MIRROR = typer.Option(..., "--mirror", help="The mirror directory (from `gpu-airgap mirror sync`).")
_UPSTREAM = typer.Option(
    None,
    "--upstream",
    show_default=False,
    help=f"Base URL of NVIDIA's repositories (default: the lockfile's, else the mirror's, else {DEFAULT_UPSTREAM}).",
)
_REPLACE = typer.Option(
    False,
    "--replace-upstream",
    help="Switch a mirror that holds repos to another --upstream or --keyring than the one it recorded.",
)
_CHANNEL = typer.Option(
    "stable",
    "--channel",
    click_type=click.Choice(CHANNELS),
    help="stable or experimental (release candidates).",
)
_FORMAT = typer.Option("deb,rpm", "--format", help="Package formats, comma-separated: deb, rpm.")
_ARCH = typer.Option(
    ["amd64"],
    "--arch",
    help="Architectures (amd64/x86_64, arm64/aarch64/sbsa, ppc64el); repeat or comma-separate.",
)
_VERSION = typer.Option(
    None,
    "--version",
    show_default=False,
    help="latest (default), all (every package: a full mirror), 1.17.8, 1.17.8-1, '>=1.17,<1.18' or '1.17.*'.",
)
_KEYRING = typer.Option(
    None,
    "--keyring",
    help="Trust this key file instead of NVIDIA's pinned key (default: the key the mirror recorded).",
)
_JOBS = typer.Option(4, "--jobs", min=1, max=64, help="Parallel downloads.")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_QUIET = typer.Option(False, "--quiet", "-q", help="Print nothing but errors.")
_LOCKED = typer.Option(None, "--locked", help="Take exactly the set in this lockfile (gpu-airgap.lock).")
_WRITE_LOCK = typer.Option(None, "--write-lock", help="Record the synced set in this lockfile.")
_ALLOW_OLDER = typer.Option(
    False,
    "--allow-older-index",
    help="Accept a signed index older than the mirror's, expired, or no longer listing a release it holds "
    "(the replaced index is kept, so those releases stay buildable).",
)


_MIN_RATE = typer.Option(
    DEFAULT_MIN_RATE,
    "--min-rate",
    min=0,
    metavar="BYTES",
    help=f"Abandon a download slower than this many bytes/s over {WINDOW:.0f} s (0: never).",
)


def _options(
    ctx: typer.Context,
    upstream: Optional[str],
    channel: str,
    fmt: str,
    arch: list[str],
    version: Optional[str],
    locked: Optional[Path],
    recorded: Optional[MirrorState] = None,
) -> tuple[sync_lib.SyncOptions, Chosen]:
    """The sync options of the command line, and where the upstream came from (flag > lockfile > mirror > default)."""
    from mirror.release.selectors import VersionSelector
    from mirror.sync import core as sync_lib
    from mirror.sync import origin

    refuse_with(
        ctx, "locked", ["version", "channel", "fmt", "arch"], "the lockfile names the release and the targets"
    )
    version = version or "latest"
    if channel not in CHANNELS:
        raise UsageError(f"unknown --channel {channel!r}; use stable or experimental")
    VersionSelector.parse(version)  # a bad --version is a usage error before anything is fetched
    lock = Lockfile.load(locked) if locked is not None else None
    if lock is not None:
        channel = lock.channel
        targets = [sync_lib.RepoTarget(PackageFormat(t.format), t.arch) for t in lock.targets]
    else:
        arches = [a for value in arch for a in value.split(",") if a.strip()]
        targets = sync_lib.parse_targets([f for f in fmt.split(",") if f.strip()], arches)
        if not targets:  # "--format ," would sync nothing and succeed
            raise UsageError("--format and --arch name no target; give e.g. --format deb --arch amd64")
    chosen = origin.choose_upstream(upstream, lock, recorded)
    options = sync_lib.SyncOptions(
        upstream=chosen.value, channel=channel, targets=tuple(targets), selector=version, locked=lock
    )
    return options, chosen


def _silent(line: str) -> None:
    """--quiet: retries are not errors, so they are not shown."""


def _warn_channel(options: sync_lib.SyncOptions, quiet: bool) -> None:
    if options.channel == "experimental" and not quiet:
        output.warn("the experimental channel carries release candidates, which are not for production")


def _target_json(item: sync_lib.PlannedTarget) -> dict[str, Any]:
    return {
        "repo": item.key,
        "format": item.target.format.value,
        "arch": item.target.arch,
        "toolkit_version": item.toolkit_version,
        "key_fingerprint": item.fingerprint,
        "total_bytes": item.total_bytes,
        "packages": [
            {
                "name": p.name,
                "version": p.version,
                "arch": p.arch,
                "size": p.size,
                "sha256": p.sha256,
                "sha512": p.sha512,
                "path": item.path(p),
                "url": item.url(p),
            }
            for p in item.held
        ],
        "node_requirements": list(item.node_requirements),
        "breaks": list(item.breaks),
        "releases": sorted(
            [r.toolkit_version for r in item.other_releases] + [item.toolkit_version],
            key=sort_key(item.target.format),
        ),  # oldest first, like the state
        "no_longer_listed": list(item.unlisted),  # held releases a kept index serves (--allow-older-index)
    }


def _target_lines(item: sync_lib.PlannedTarget) -> list[str]:
    older = f" and {len(item.other_releases)} other releases" if item.other_releases else ""
    lines = [
        f"{item.key}: nvidia-container-toolkit {item.toolkit_version}{older}"
        f" ({len(item.held)} packages, {item.total_bytes} bytes)"
    ]
    for p in item.held:
        digest = f"sha512:{p.sha512[:16]}" if p.sha512 else f"sha256:{(p.sha256 or '')[:16]}"
        lines.append(f"  {p.name:<32} {p.version:<16} {p.arch:<8} {p.size:>10}  {digest}")
    if item.node_requirements:
        lines.append("  node must provide: " + ", ".join(item.node_requirements))
    if item.breaks:
        lines.append("  breaks: " + "; ".join(item.breaks))
    return lines


def sync_command(
    ctx: typer.Context,
    dest: Path = _DEST,
    upstream: Optional[str] = _UPSTREAM,
    channel: str = _CHANNEL,
    fmt: str = _FORMAT,
    arch: List[str] = _ARCH,
    version: Optional[str] = _VERSION,
    keyring: Optional[Path] = _KEYRING,
    jobs: int = _JOBS,
    json_output: bool = _JSON,
    quiet: bool = _QUIET,
    locked: Optional[Path] = _LOCKED,
    write_lock: Optional[Path] = _WRITE_LOCK,
    allow_older_index: bool = _ALLOW_OLDER,
    replace_upstream: bool = _REPLACE,
    min_rate: int = _MIN_RATE,
) -> None:
    """Download the resolved toolkit release into a local mirror, verified, all or nothing."""
    from mirror.disk.trust import keyring_for
    from mirror.sync import core as sync_lib
    from mirror.sync import cuda, origin
    from mirror.sync import progress as progress_lib
    from mirror.sync.http import Downloader

    recorded = origin.recorded_state(dest)
    options, chosen = _options(ctx, upstream, channel, fmt, arch, version, locked, recorded)
    cuda.check_sync(
        options.upstream, len(options.targets), has_key=keyring is not None or bool(recorded and recorded.key)
    )
    _warn_channel(options, quiet)  # on stderr, so --json still prints one object on stdout
    progress = progress_lib.choose(quiet=quiet, json_output=json_output)
    try:
        with (
            keyring_for(keyring, recorded) as key,
            Downloader(jobs=jobs, notify=_silent if quiet else output.warn, min_rate=min_rate) as downloader,
        ):
            origin.check_lock_keys(options.locked, key)
            options = dataclasses.replace(
                options,
                allow_older_index=allow_older_index,
                key_fingerprints=key.fingerprints,
                key=key.armored,
                replace_upstream=replace_upstream,
            )
            if not quiet and not json_output:
                output.note(f"upstream {chosen.said('--upstream')}, key {key.chosen.said('--keyring')}")
            if warning := cuda.key_warning(options.upstream, key.fingerprints):
                output.warn(warning)
            try:
                result = sync_lib.sync(
                    options,
                    dest,
                    downloader=downloader,
                    loader=sync_lib.make_loader(key.ring, names=cuda.names_for(options.upstream)),
                    progress=progress,
                )
            finally:
                progress.close()
    except KeyboardInterrupt:
        # Even with --quiet: say that the mirror is unchanged and nothing downloaded is lost.
        output.warn("interrupted; the mirror is unchanged and the next sync resumes the downloads")
        raise
    for item in result.targets:
        if item.unlisted:  # accepted with --allow-older-index: say what the mirror kept for them
            output.warn(
                f"upstream's signed index of {item.key} no longer lists {', '.join(item.unlisted)}; "
                "the mirror kept the index it replaced, so they stay buildable"
            )
    for warning in [] if quiet else result.warnings:
        output.warn(warning)
    if write_lock is not None:
        result.to_lockfile(options.upstream).save(write_lock)
    if json_output:
        output.emit_json(
            {
                "dest": str(dest),
                "channel": result.channel,
                "upstream": {"url": chosen.value, "source": chosen.source},
                "key": {"fingerprints": list(options.key_fingerprints), "source": key.source},
                "downloaded_files": result.downloaded_files,
                "downloaded_bytes": result.downloaded_bytes,
                "reused_files": result.reused_files,
                "seconds": round(result.seconds, 3),
                "lockfile": str(write_lock) if write_lock else None,
                "targets": [_target_json(t) for t in result.targets],
            }
        )
    elif not quiet:
        output.emit_lines(line for t in result.targets for line in _target_lines(t))
        output.emit_lines(
            [
                f"synced {dest}: downloaded {result.downloaded_files} file(s), {result.downloaded_bytes} bytes; "
                f"{result.reused_files} already present; {result.seconds:.2f} s"
            ]
        )


def plan_command(
    ctx: typer.Context,
    upstream: Optional[str] = _UPSTREAM,
    channel: str = _CHANNEL,
    fmt: str = _FORMAT,
    arch: List[str] = _ARCH,
    version: Optional[str] = _VERSION,
    keyring: Optional[Path] = _KEYRING,
    json_output: bool = _JSON,
    locked: Optional[Path] = _LOCKED,
) -> None:
    """Show the resolved set (name, version, arch, size, checksum, total bytes); download no package."""
    from mirror.disk.trust import open_keyring
    from mirror.sync import core as sync_lib
    from mirror.sync import cuda
    from mirror.sync.http import Downloader

    options, _chosen = _options(ctx, upstream, channel, fmt, arch, version, locked)
    cuda.check_sync(options.upstream, len(options.targets), has_key=keyring is not None)
    _warn_channel(options, quiet=False)
    with open_keyring([keyring] if keyring else None) as ring, Downloader() as downloader:
        loader = sync_lib.make_loader(ring, names=cuda.names_for(options.upstream))
        planned = sync_lib.plan(options, fetcher=downloader.fetcher(), loader=loader)
    total = sum(t.total_bytes for t in planned)
    if json_output:
        output.emit_json(
            {"channel": options.channel, "total_bytes": total, "targets": [_target_json(t) for t in planned]}
        )
    else:
        output.emit_lines(line for t in planned for line in _target_lines(t))
        output.emit_lines([f"total: {total} bytes in {sum(len(t.held) for t in planned)} package file(s)"])


def status_command(
    mirror: Path = _MIRROR,
    keyring: Optional[Path] = _KEYRING,
    offline: bool = typer.Option(False, "--offline", help="Do not ask upstream what is newer."),
    json_output: bool = _JSON,
) -> None:
    """Show what the mirror holds and what is newer upstream on its channel."""
    from mirror.disk.store import read_state
    from mirror.disk.trust import keyring_for
    from mirror.sync import core as sync_lib
    from mirror.sync import cuda, maintain
    from mirror.sync.http import Downloader

    used: Optional[dict[str, Any]] = None  # the key upstream was checked with (None: not checked)
    if offline:
        repos = maintain.status(mirror, fetcher=None, loader=None)
    else:
        # upstream is checked with the key the mirror was verified with, unless --keyring names another
        with keyring_for(keyring, read_state(mirror)) as key, Downloader() as downloader:
            if not json_output:
                output.note(f"checking upstream with key {key.chosen.said('--keyring')}")
            fetcher = downloader.fetcher(maintain.ReadOnlyCache(mirror))
            names = cuda.names_for(read_state(mirror).upstream)
            repos = maintain.status(
                mirror, fetcher=fetcher, loader=sync_lib.make_loader(key.ring, names=names)
            )
            used = {"fingerprints": list(key.fingerprints), "source": key.source}
    if json_output:
        output.emit_json(
            {
                "mirror": str(mirror),
                "key": used,
                "repos": [{**dataclasses.asdict(r), "newer_upstream": r.newer_upstream} for r in repos],
            }
        )
        return
    for r in repos:
        line = f"{r.key}: {', '.join(r.releases)} ({r.packages} files, {r.bytes} bytes, synced {r.synced_at})"
        if r.vouched:
            line += f"; vouched for by the operator: {', '.join(r.vouched)}"
        if r.error:
            line += f"; upstream not checked: {r.error}"
        elif r.newer_upstream:
            line += f"; newer upstream: {r.upstream_latest}"
        elif r.upstream_latest:
            line += "; up to date"
        output.emit_lines([line])


def verify_command(mirror: Path = _MIRROR, json_output: bool = _JSON) -> None:
    """Re-hash every file of the mirror against the checksums recorded from signed metadata."""
    from mirror.sync import maintain

    report = maintain.verify(mirror)
    if json_output:
        output.emit_json(
            {"mirror": str(mirror), "files": report.files, "bytes": report.bytes, "problems": report.problems}
        )
    if report.problems:
        raise ProblemsFound(f"{len(report.problems)} problem(s) in {mirror}", report.problems)
    if not json_output:
        output.emit_lines([f"{mirror}: {report.files} files, {report.bytes} bytes, all match"])


def prune_command(
    mirror: Path = _MIRROR,
    keep: int = typer.Option(..., "--keep", help="How many of the newest toolkit releases to keep per repo."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show what would be removed."),
    json_output: bool = _JSON,
) -> None:
    """Keep the newest N toolkit releases (and what they need); delete the rest."""
    from mirror.sync import maintain

    report = maintain.prune(mirror, keep, dry_run=dry_run)
    if json_output:
        output.emit_json({"mirror": str(mirror), "dry_run": dry_run, **dataclasses.asdict(report)})
        return
    verb = "would remove" if dry_run else "removed"
    output.emit_lines([f"{verb} release {r}" for r in report.removed_releases])
    output.emit_lines([f"{verb} {len(report.removed_files)} file(s), {report.freed_bytes} bytes"])
