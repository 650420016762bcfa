"""``gpu-airgap bundle build``: a thin typer command over :func:`mirror.bundle.build.build_bundle`.

The builder is imported when the command runs, so every other command starts without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import click
import typer

from mirror.model import CHANNELS, COMPRESSIONS
from plumbing import output
from plumbing.clikit import emit_report, refuse_json_to_stdout, refuse_with
from plumbing.errors import UsageError
from plumbing.output_target import output_is_stream, output_path

_MIRROR = typer.Option(..., "--mirror", help="The mirror directory (from `gpu-airgap mirror sync`).")
_VERSION = typer.Option(
    None,
    "--version",
    show_default=False,
    help="Toolkit release, as for mirror sync: latest (default), 1.17.8, 1.17.8-1, '1.17.*' or '>=1.17,<1.18'.",
)
_CHANNEL = typer.Option(
    None,
    "--channel",
    click_type=click.Choice(CHANNELS),
    help="stable (the default, whatever channel was synced last) or experimental (release candidates).",
)
_TARGET = typer.Option(
    [], "--target", help="deb/amd64, rpm/x86_64, …; repeat for several. (required: one of --target, --locked)"
)
_SIGN_KEY = typer.Option(
    ...,
    "--sign-key",
    help="The operator's secret key (fingerprint or key id); give it twice (old and new key) to rotate keys.",
)
_EXPIRES = typer.Option(
    None,
    "--expires",
    metavar="DURATION",
    help="Nodes refuse the bundle this long after its build time (90m, 12h, 30d, 8w); default: never.",
)
_GNUPGHOME = typer.Option(None, "--gnupghome", help="gpg home holding the secret key.")
_OUTPUT_FILE = typer.Option(..., "--output", help="The bundle file to write.")
_COMPRESSION = typer.Option(
    None,
    "--compression",
    click_type=click.Choice(COMPRESSIONS),
    show_default=False,
    help="zstd, xz, gzip or none (nodes without zstd: xz); default: what --output's name says, else zstd.",
)
_SPLIT = typer.Option(
    None, "--split", help="Write parts of at most this size (650M, 4G) plus a signed checksum list."
)
_LOCKED = typer.Option(
    None,
    "--locked",
    help="Take exactly the set in this lockfile (gpu-airgap.lock). (required: one of --target, --locked)",
)
_JSON_OUTPUT = typer.Option(False, "--json", help="Print one JSON object.")
_SNAPSHOT = typer.Option(
    None, "--snapshot", help="Build from this snapshot of the mirror (`mirror snapshot create`)."
)


def add_build_command(app: typer.Typer) -> None:
    """Register ``build`` on the ``bundle`` group."""
    app.command("build")(build_command)


def build_command(
    ctx: typer.Context,
    mirror: Path = _MIRROR,
    version: Optional[str] = _VERSION,
    channel: Optional[str] = _CHANNEL,
    target: List[str] = _TARGET,
    sign_key: List[str] = _SIGN_KEY,
    gnupghome: Optional[Path] = _GNUPGHOME,
    output_file: Path = _OUTPUT_FILE,
    compression: Optional[str] = _COMPRESSION,
    split: Optional[str] = _SPLIT,
    locked: Optional[Path] = _LOCKED,
    expires: Optional[str] = _EXPIRES,
    json_output: bool = _JSON_OUTPUT,
    snapshot: Optional[str] = _SNAPSHOT,
) -> None:
    """Build one signed offline bundle from a mirror."""
    from installer.freshness import RELEASE_CANDIDATE_NOTE, expiry_text, parse_duration, utc_now
    from mirror.bundle.build import build_bundle, compression_for, fips_warnings, parse_size
    from mirror.bundle.source import parse_target
    from mirror.release.lockfile import Lockfile
    from mirror.release.selectors import VersionSelector
    from plumbing.progress import terminal_meter

    if compression is not None and compression not in COMPRESSIONS:
        raise UsageError(f"unknown --compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")
    refuse_with(
        ctx, "locked", ["version", "channel", "target"], "the lockfile names the release and the targets"
    )
    VersionSelector.parse(version or "latest")  # a bad --version is a usage error before the mirror is read
    lifetime = parse_duration(expires) if expires is not None else None
    refuse_json_to_stdout(json_output, output_file)
    if split and output_is_stream(output_file):
        raise UsageError(f"--split writes several files; --output {output_file} is a device or a pipe")
    if snapshot is not None:  # a snapshot is a mirror of its own (mirror.disk.snapshot)
        from mirror.disk import snapshot as snapshots

        mirror = snapshots.path(mirror, snapshot)
    with output_path(output_file) as writing:
        result = build_bundle(
            mirror,
            version=version or "latest",
            channel=channel,
            targets=[parse_target(t) for t in target],
            sign_key=sign_key,
            gnupghome=gnupghome,
            output=writing,
            compression=compression_for(output_file, compression),
            split=parse_size(split) if split else None,
            locked=Lockfile.load(locked) if locked is not None else None,
            meter=terminal_meter("writing the bundle", quiet=json_output),
            expires=lifetime,
        )
    outputs = [output_file] if writing != output_file else list(result.outputs)
    manifest = result.manifest
    release_candidate = manifest.channel == "experimental"
    from installer.nodecheck import node_command

    # the bundle, or the first part of a split one: a node takes the node check out of it alone
    command = node_command(result.outputs[0].name)
    not_fips = fips_warnings(manifest)
    for warning in not_fips.values():
        output.warn(warning)
    if json_output:
        output.emit_json(
            {
                "outputs": [str(p) for p in outputs],
                "node_command": command,
                "members": result.members,
                "payload_bytes": result.payload_bytes,
                "toolkit_version": result.manifest.toolkit_version,
                "targets": [f"{t.format}/{t.arch}" for t in result.manifest.targets],
                "signer": manifest.signer,
                "signers": list(manifest.signers or (manifest.signer,)),
                "channel": manifest.channel,
                "release_candidate": release_candidate,
                "created": manifest.created,
                "expires": manifest.expires,
                # rpm targets: whether their rpms install on FIPS nodes (SHA256 file digests)
                "fips_ready": {
                    f"{t.format}/{t.arch}": f"{t.format}/{t.arch}" not in not_fips
                    for t in manifest.targets
                    if t.format == "rpm"
                },
            }
        )
        return
    lines = [f"wrote {p}" for p in outputs]
    lines.append(
        f"{result.members} members, {result.payload_bytes} bytes, toolkit {result.manifest.toolkit_version}, "
        f"targets {', '.join(f'{t.format}/{t.arch}' for t in result.manifest.targets)}, "
        f"signed by {' and '.join(manifest.signers or (manifest.signer,))}"
    )
    lines.append(f"built {manifest.created}, {expiry_text(manifest.expires, utc_now())}")
    lines += [RELEASE_CANDIDATE_NOTE] if release_candidate else []
    lines += [
        "on the node, with operator.asc the operator's public key (given out of band), check the node files with",
        "the node's own tools before anything from the bundle runs, then install (install options go at the end):",
        f"  {command}",
    ]
    emit_report(lines, output_file)
