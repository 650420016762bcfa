"""``gpu-airgap mirror import-archive``: a thin command over :func:`mirror.sync.archive.import_archive`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from plumbing import output

_ARCHIVE = typer.Argument(
    ..., help="NVIDIA's release archive: nvidia-container-toolkit_<version>_<deb|rpm>_<arch>.tar.gz."
)
_MIRROR = typer.Option(..., "--mirror", help="The mirror directory (from `gpu-airgap mirror sync`).")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_TRUST = typer.Option(
    False,
    "--trust-archive",
    help="Vouch for packages no signed index the mirror holds lists: take them on your word, recorded as such.",
)


def add_import_command(app: typer.Typer) -> None:
    """Register ``import-archive`` on the ``mirror`` group."""
    app.command("import-archive")(import_archive_command)


def import_archive_command(
    archive: Path = _ARCHIVE, mirror: Path = _MIRROR, trust_archive: bool = _TRUST, json_output: bool = _JSON
) -> None:
    """Take NVIDIA's release archive of the toolkit's packages into the mirror, each checked against its signed index."""
    from mirror.sync.archive import import_archive

    result = import_archive(archive, mirror, trust=trust_archive)
    if json_output:
        output.emit_json(dataclasses.asdict(result))
        return
    output.emit_lines(
        [
            f"{result.repo}: toolkit {result.toolkit_version} from {Path(result.archive).name}: "
            f"{len(result.imported) - len(result.vouched)} package(s) verified against the mirror's signed index"
            + (f", {len(result.vouched)} taken on your word (--trust-archive)" if result.vouched else "")
            + (f", {len(result.already_held)} held already" if result.already_held else "")
        ]
    )
