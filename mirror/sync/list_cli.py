"""``gpu-airgap mirror list``: a thin command over :func:`mirror.sync.listing.list_releases`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import click
import typer

from mirror.model import CHANNELS
from plumbing import output

if TYPE_CHECKING:
    from mirror.sync.listing import RepoListing
    from mirror.sync.targets import RepoTarget

_MIRROR = typer.Option(
    None, "--mirror", help="The mirror directory: mark what it holds; its upstream and key are used."
)
_UPSTREAM = typer.Option(
    None,
    "--upstream",
    show_default=False,
    help="Base URL of NVIDIA's repositories (default: the lockfile's, else the mirror's, else NVIDIA's).",
)
_KEYRING = typer.Option(
    None, "--keyring", help="Trust this key file (default: the key the mirror recorded, else NVIDIA's)."
)
_CHANNEL = typer.Option(
    None,
    "--channel",
    click_type=click.Choice(CHANNELS),
    show_default=False,
    help="stable or experimental (default: both).",
)
_FORMAT = typer.Option(
    None,
    "--format",
    show_default=False,
    help="deb, rpm or deb,rpm (default: the mirror's formats, else both).",
)
_ARCH = typer.Option(
    [],
    "--arch",
    show_default=False,
    help="Architectures; repeat or comma-separate (default: the mirror's, else amd64).",
)
_VERSION = typer.Option(
    None,
    "--version",
    show_default=False,
    help="Only these releases: latest, 1.17.8, 1.17.8-1, '1.17.*' or '>=1.17,<1.18' (default: all).",
)
_LOCKED = typer.Option(None, "--locked", help="Mark the release this lockfile (gpu-airgap.lock) pins.")
_OFFLINE = typer.Option(False, "--offline", help="Do not ask upstream; list the mirror's releases.")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")


def add_list_command(app: typer.Typer) -> None:
    """Register ``list`` on the ``mirror`` group."""
    app.command("list")(list_command)


def list_command(
    mirror: Optional[Path] = _MIRROR,
    upstream: Optional[str] = _UPSTREAM,
    keyring: Optional[Path] = _KEYRING,
    channel: Optional[str] = _CHANNEL,
    fmt: Optional[str] = _FORMAT,
    arch: List[str] = _ARCH,
    version: Optional[str] = _VERSION,
    locked: Optional[Path] = _LOCKED,
    offline: bool = _OFFLINE,
    json_output: bool = _JSON,
) -> None:
    """List the toolkit releases per channel, format and arch: upstream, in the mirror, locked, release candidates."""
    from mirror.disk.store import read_state
    from mirror.disk.trust import keyring_for
    from mirror.release.lockfile import Lockfile
    from mirror.release.selectors import VersionSelector
    from mirror.sync import cuda, listing, origin
    from mirror.sync.http import Downloader
    from mirror.sync.maintain import ReadOnlyCache
    from mirror.sync.targets import make_loader
    from plumbing.errors import UsageError

    selector = VersionSelector.parse(version) if version is not None else None
    if selector is not None and selector.kind == "all":
        selector = None
    if offline and mirror is None:
        raise UsageError("--offline lists the mirror's releases: name it with --mirror")
    lock = Lockfile.load(locked) if locked is not None else None
    state = read_state(mirror) if mirror is not None else None
    targets = _targets(fmt, arch, listing.mirror_targets(state))
    channels = [channel] if channel else list(CHANNELS)
    chosen = origin.choose_upstream(upstream, lock, state)
    report: dict[str, Any] = {"mirror": str(mirror) if mirror else None}
    releases = functools.partial(
        listing.list_releases,
        channels,
        targets,
        upstream=chosen.value,
        state=state,
        lock=lock,
        selector=selector,
    )
    if offline:
        repos, unreachable = releases(fetcher=None, loader=None)
        report["upstream"] = {"url": chosen.value, "source": chosen.source, "reachable": None}
        report["key"] = None
    else:
        with keyring_for(keyring, state) as key, Downloader() as downloader:
            fetcher = downloader.fetcher(ReadOnlyCache(mirror) if mirror is not None else None)
            loader = make_loader(key.ring, names=cuda.names_for(chosen.value))
            repos, unreachable = releases(fetcher=fetcher, loader=loader)
        report["upstream"] = {"url": chosen.value, "source": chosen.source, "reachable": unreachable is None}
        report["key"] = {"fingerprints": list(key.fingerprints), "source": key.source}
        if unreachable is not None and state is None:
            raise unreachable  # nothing to list instead
        if not json_output:
            output.note(f"upstream {chosen.said('--upstream')}, key {key.chosen.said('--keyring')}")
        if unreachable is not None:
            output.warn(f"upstream is not reachable ({unreachable}); listing the mirror's releases only")
    if json_output:
        output.emit_json({**report, "repos": [_repo_json(r) for r in repos]})
        return
    output.emit_lines(line for r in repos for line in _repo_lines(r, unreachable is not None))


def _targets(fmt: Optional[str], arch: List[str], held: list[RepoTarget]) -> list[RepoTarget]:
    """--format/--arch as targets; what is not given comes from the mirror's targets (else deb and rpm, amd64)."""
    from mirror.sync.targets import parse_targets

    if fmt is None and not arch and held:
        return held
    formats = [f for f in fmt.split(",") if f.strip()] if fmt is not None else []
    arches = [a for value in arch for a in value.split(",") if a.strip()]
    formats = formats or list(dict.fromkeys(t.format.value for t in held)) or ["deb", "rpm"]
    arches = arches or list(dict.fromkeys(t.arch for t in held)) or ["amd64"]
    return parse_targets(formats, arches)


def _repo_json(repo: RepoListing) -> dict[str, Any]:
    return {
        "repo": repo.key,
        "channel": repo.channel,
        "format": repo.format,
        "arch": repo.arch,
        "upstream_error": repo.upstream_error,
        "releases": [
            {
                "version": r.version,
                "upstream": r.upstream,
                "mirror": r.mirror,
                "locked": r.locked,
                "release_candidate": r.release_candidate,
            }
            for r in repo.releases
        ],
    }


def _repo_lines(repo: RepoListing, unreachable: bool) -> list[str]:
    lines = [repo.key]
    if repo.upstream_error and not unreachable:
        lines.append(f"  upstream not listed: {repo.upstream_error}")
    if not repo.releases:
        lines.append("  no release")
    width = max((len(r.version) for r in repo.releases), default=0)
    lines += [f"  {r.version:<{width}}  [{', '.join(r.marks)}]" for r in repo.releases]
    return lines
