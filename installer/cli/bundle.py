"""``gpu-airgap bundle inspect|verify``: thin typer commands over :mod:`installer.bundle`.

They build the collaborators (the operator keyring), call the library and render the result
through :mod:`plumbing.output`; a failed verification becomes an exit code here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import typer

from plumbing import output
from plumbing.errors import ExitCode

if TYPE_CHECKING:
    from installer.manifest import Manifest

_FILE = typer.Argument(..., help="The bundle file, or FILE.part001 of a split bundle.")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_KEYRING = typer.Option(
    ..., "--keyring", help="The operator's public key file (armored or binary); the only key trusted."
)
FINGERPRINT = typer.Option(
    None,
    "--fingerprint",
    metavar="FPR",
    help="Trust only this key of --keyring (full 40-hex fingerprint); required when the file holds several.",
)
ALLOW_EXPIRED = typer.Option(False, "--allow-expired", help="Accept a bundle past its signed expiry.")


def add_bundle_commands(app: typer.Typer) -> None:
    """Register ``inspect`` and ``verify`` on the ``bundle`` group."""
    app.command("inspect")(inspect_command)
    app.command("verify")(verify_command)


def inspect_command(file: Path = _FILE, json_output: bool = _JSON) -> None:
    """Show a bundle's targets, packages, sizes, provenance and claimed signer (no key needed; nothing verified)."""
    # The library (and python-gnupg) loads only when a command runs, so --help stays fast.
    from installer import bundle as bundle_lib

    manifest = bundle_lib.inspect(file)
    if json_output:
        data = manifest.to_dict()
        data["verified"] = False
        output.emit_json(data)
    else:
        output.emit_lines(manifest_lines(manifest))


def verify_command(
    file: Path = _FILE,
    keyring: Path = _KEYRING,
    fingerprint: Optional[str] = FINGERPRINT,
    allow_expired: bool = ALLOW_EXPIRED,
    json_output: bool = _JSON,
) -> None:
    """Check the signature and every member's size and sha256 without extracting anything."""
    from installer import bundle as bundle_lib
    from installer.freshness import Policy
    from plumbing.gpg import Keyring
    from plumbing.progress import terminal_meter

    bundle_lib.require_bundle(file)  # the file named first: its absence is the mistake to report
    with Keyring.open_signer(keyring, fingerprint=fingerprint) as keys:
        meter = terminal_meter("verifying", quiet=json_output)
        report = bundle_lib.verify(file, keys, meter, Policy(allow_expired=allow_expired))
    if json_output:
        output.emit_json(report.to_dict())
        if not report.ok:
            raise typer.Exit(int(ExitCode.VERIFICATION_FAILED))
        return
    if not report.ok:
        output.emit_lines([f"FAILED: {file.name}"] + [f"  {problem}" for problem in report.problems])
        report.raise_for_problems(listed=True)
    output.emit_lines(
        [
            f"OK: {file.name} is signed by {report.signer}; {report.members_checked} members, {report.bytes_checked} bytes checked",
            *bundle_facts(report.facts()),
        ]
    )
    if not report.node_check:
        from installer.nodecheck import MISSING_NOTE

        output.warn(MISSING_NOTE)


def bundle_facts(facts: Dict[str, Any]) -> List[str]:
    """The lines ``bundle verify`` and ``install`` print about the bundle itself: age, expiry, release candidate."""
    from installer.freshness import RELEASE_CANDIDATE_NOTE

    if not facts:
        return []
    expiry = f"expires {facts['expires']}" if facts.get("expires") else "no expiry"
    return [f"{facts['age']}, {expiry}"] + ([RELEASE_CANDIDATE_NOTE] if facts["release_candidate"] else [])


def manifest_lines(manifest: Manifest) -> List[str]:
    """Human-readable summary of a manifest."""
    lines = [
        f"bundle of NVIDIA Container Toolkit {manifest.toolkit_version} ({manifest.channel}), created {manifest.created}",
        f"signer (claimed, run `bundle verify` to check): {' and '.join(manifest.signers or (manifest.signer,))}",
        f"upstream: {manifest.upstream_url} (key {manifest.upstream_fingerprint})",
        f"expires: {manifest.expires or 'never'}",
    ]
    if manifest.channel == "experimental":
        from installer.freshness import RELEASE_CANDIDATE_NOTE

        lines.append(RELEASE_CANDIDATE_NOTE)
    for target in manifest.targets:
        lines.append(
            f"target {target.format}/{target.arch}: toolkit {target.toolkit_version}, repo {target.repo_dir}/"
        )
        prov = target.provenance
        lines.append(
            f"  verified upstream metadata signed by {prov.fingerprint} at {prov.signed_at or 'unknown time'}"
        )
        for signed in prov.signed_files:
            digest = f"sha256={signed.sha256}" if signed.sha256 else f"sha512={(signed.sha512 or '-')[:32]}…"
            lines.append(f"    {signed.path} {signed.size} B {digest}")
        for pkg in target.packages:
            lines.append(
                f"  {pkg.install_order + 1}. {pkg.name} {pkg.version} {pkg.arch} {pkg.size} B sha256={pkg.sha256[:16]}…"
            )
            if pkg.breaks:
                lines.append(f"     breaks {', '.join(pkg.breaks)}")
            if pkg.header:
                lines.append(
                    "     own header: " + "; ".join(f"{name}: {value}" for name, value in pkg.header)
                )
        if target.node_requirements:
            lines.append(f"  node requirements: {', '.join(target.node_requirements)}")
        if target.format == "rpm":
            from installer.fips import fips_readiness

            lines.append("  " + fips_readiness([(p.name, p.file_digest_algo) for p in target.packages]))
    total = sum(f.size for f in manifest.files)
    lines.append(f"other members: {len(manifest.files)} ({total} B)")
    return lines
