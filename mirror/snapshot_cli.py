"""``gpu-airgap mirror snapshot create|list|diff|delete``: thin typer commands over :mod:`mirror.snapshot`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from plumbing import output
from plumbing.clikit import Group

if TYPE_CHECKING:
    from mirror.disk.snapshot import SnapshotInfo

_MIRROR = typer.Option(..., "--mirror", help="The mirror directory (from `gpu-airgap mirror sync`).")
_NAME = typer.Argument(..., help="The snapshot's name: letters, digits, '.', '_' and '-'.")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_FORCE = typer.Option(False, "--force", help="Delete even while a published tree serves the snapshot.")

snapshot_app = typer.Typer(
    cls=Group,
    help="Freeze what the mirror holds (hard links), compare and delete snapshots.",
    no_args_is_help=True,
)


@snapshot_app.command("create")
def create_command(name: str = _NAME, mirror: Path = _MIRROR, json_output: bool = _JSON) -> None:
    """Freeze what the mirror holds now as snapshot NAME (hard links: no bytes are copied)."""
    from mirror.disk import snapshot

    info = snapshot.create(mirror, name)
    if json_output:
        output.emit_json(_info_json(info))
        return
    output.emit_lines([f"created snapshot {info.name}: {_releases(info.releases)}; {info.files} file(s)"])


@snapshot_app.command("list")
def list_command(mirror: Path = _MIRROR, json_output: bool = _JSON) -> None:
    """The mirror's snapshots: created, releases per repo, bytes shared with the mirror and unique."""
    from mirror.disk import snapshot

    infos = snapshot.listing(mirror)
    if json_output:
        output.emit_json({"snapshots": [_info_json(i) for i in infos]})
        return
    if not infos:
        output.emit_lines(
            [f"mirror {mirror} has no snapshot (make one with `gpu-airgap mirror snapshot create`)"]
        )
        return
    output.emit_lines(
        f"{i.name}  {i.created}  {_releases(i.releases)}  {i.shared_bytes} bytes shared, {i.unique_bytes} unique"
        for i in infos
    )


@snapshot_app.command("diff")
def diff_command(
    a: str = typer.Argument(..., help="A snapshot name, or current for the live mirror."),
    b: str = typer.Argument(..., help="A snapshot name, or current for the live mirror."),
    mirror: Path = _MIRROR,
    json_output: bool = _JSON,
) -> None:
    """Releases and packages added and removed from A to B."""
    from mirror.disk import snapshot

    changes = snapshot.diff(mirror, a, b)
    if json_output:
        output.emit_json({"from": a, "to": b, "repos": [c.__dict__ for c in changes]})
        return
    if not changes:
        output.emit_lines([f"{a} and {b} hold the same releases and packages"])
        return
    lines = []
    for c in changes:
        lines += [f"{c.key}: + release {v}" for v in c.releases_added]
        lines += [f"{c.key}: - release {v}" for v in c.releases_removed]
        lines += [f"{c.key}: + {p}" for p in c.packages_added]
        lines += [f"{c.key}: - {p}" for p in c.packages_removed]
    output.emit_lines(lines)


@snapshot_app.command("delete")
def delete_command(
    name: str = _NAME, mirror: Path = _MIRROR, force: bool = _FORCE, json_output: bool = _JSON
) -> None:
    """Delete snapshot NAME (refused while a publish serves it, unless --force)."""
    from mirror.disk import snapshot
    from mirror.publish.promote import published_at

    serving = published_at(mirror, name)
    snapshot.delete(mirror, name, published_at=serving, force=force)
    if json_output:
        output.emit_json({"deleted": name, "published_at": serving})
    else:
        output.emit_lines([f"deleted snapshot {name}"])


def _releases(releases: dict[str, list[str]]) -> str:
    return ", ".join(f"{key} {' '.join(versions) or 'no release'}" for key, versions in releases.items())


def _info_json(info: SnapshotInfo) -> dict[str, object]:
    return dataclasses.asdict(info)
