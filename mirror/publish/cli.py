"""``gpu-airgap mirror publish``: a thin typer command over :func:`mirror.publish.tree.publish`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from mirror.publish.files import DEFAULT_KEYRING_NAME, valid_keyring_name
from plumbing import output
from plumbing.errors import UsageError

_MIRROR = typer.Option(None, "--mirror", help="The mirror directory (from `gpu-airgap mirror sync`).")
_OUTPUT = typer.Option(
    ..., "--output", help="The directory to publish into (replaced atomically; served by your web server)."
)
_BASE_URL = typer.Option(
    None, "--base-url", help="The URL nodes reach --output at, e.g. http://mirror.internal/nvct."
)
_SNAPSHOT = typer.Option(
    None,
    "--snapshot",
    help="Publish this snapshot of the mirror (`mirror snapshot create`) instead of its live state.",
)
_ROLLBACK = typer.Option(
    False,
    "--rollback",
    help="Serve the tree the last publish to --output replaced again (atomic; run it again to undo); "
    "its apt indexes are signed again, dated now, by the key that published them (--gnupghome).",
)
_SIGN_KEY = typer.Option(
    None,
    "--sign-key",
    help="The operator's secret key (fingerprint or key id) that signs the indexes. "
    "(required: one of --sign-key, --preserve-upstream)",
)
_GNUPGHOME = typer.Option(None, "--gnupghome", help="gpg home holding the secret key.")
_PRESERVE = typer.Option(
    False,
    "--preserve-upstream",
    help="Publish upstream's own signed indexes unchanged (needs an unfiltered mirror). "
    "(required: one of --sign-key, --preserve-upstream)",
)
_KEYRING = typer.Option(
    None,
    "--keyring",
    help="With --preserve-upstream: upstream's key file (default: the key the mirror recorded, else NVIDIA's).",
)
_KEYRING_NAME = typer.Option(
    DEFAULT_KEYRING_NAME, "--keyring-name", help="Nodes keep the key as /usr/share/keyrings/NAME.gpg."
)
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_QUIET = typer.Option(False, "--quiet", "-q", help="Print nothing but errors.")


def add_publish_command(app: typer.Typer) -> None:
    """Register ``publish`` on the ``mirror`` group."""
    # its old --dest and --out still work, as everywhere (plumbing.spellings)
    app.command("publish")(publish_command)


def publish_command(
    mirror: Optional[Path] = _MIRROR,
    out: Path = _OUTPUT,
    base_url: Optional[str] = _BASE_URL,
    snapshot: Optional[str] = _SNAPSHOT,
    rollback: bool = _ROLLBACK,
    sign_key: Optional[str] = _SIGN_KEY,
    gnupghome: Optional[Path] = _GNUPGHOME,
    preserve_upstream: bool = _PRESERVE,
    keyring: Optional[Path] = _KEYRING,
    keyring_name: str = _KEYRING_NAME,
    json_output: bool = _JSON,
    quiet: bool = _QUIET,
) -> None:
    """Publish the mirror as a tree nodes' own apt and dnf trust (NVIDIA's layout at --base-url)."""
    if rollback:
        if mirror is not None or base_url is not None or snapshot is not None or preserve_upstream:
            raise UsageError(
                "--rollback takes only --output (it serves the tree kept from the last publish), "
                "and --gnupghome or --sign-key for the key that signs its indexes again"
            )
        _rollback(out, sign_key, gnupghome, json_output=json_output, quiet=quiet)
        return
    if mirror is None or base_url is None:
        raise UsageError("name the mirror with --mirror and where nodes reach --output with --base-url")
    from mirror.disk.store import MirrorState
    from mirror.disk.trust import keyring_for
    from mirror.hostenv import build_epoch, package_info_cache
    from mirror.publish.swap import check_target
    from mirror.publish.tree import normalize_base_url, publish
    from mirror.signing.key import OperatorKey
    from plumbing.keyfile import check_key_file
    from plumbing.progress import terminal_meter

    url = normalize_base_url(base_url)
    if not valid_keyring_name(keyring_name):  # usage errors first; publish() checks again for library callers
        raise UsageError(
            f"--keyring-name {keyring_name!r} must be a plain file name such as {DEFAULT_KEYRING_NAME}"
        )
    if preserve_upstream and sign_key and not quiet:
        output.warn("--sign-key is not used: --preserve-upstream keeps upstream's signatures")
    if not preserve_upstream and not sign_key:
        raise UsageError(
            "name the operator key with --sign-key (or keep upstream's signatures with --preserve-upstream)"
        )
    if keyring is not None and not preserve_upstream:
        raise UsageError("--keyring only applies with --preserve-upstream")
    if keyring is not None:
        check_key_file(keyring)
    # --output and the mirror are checked before the key is looked up, so their errors are the ones reported.
    check_target(out, mirror)
    live = mirror
    if snapshot is not None:
        from mirror.disk import snapshot as snapshots

        mirror = snapshots.path(mirror, snapshot)
    state = MirrorState.load(mirror)
    epoch = build_epoch()
    meter = terminal_meter("publishing", quiet=quiet or json_output)
    with contextlib.ExitStack() as stack:
        if preserve_upstream:
            # upstream's signatures are checked with --keyring, else the key the mirror was synced with
            ring = stack.enter_context(keyring_for(keyring, state)).ring
            result = publish(
                mirror,
                out,
                base_url=url,
                keyring_name=keyring_name,
                key=None,
                upstream_keyring=ring,
                epoch=epoch,
                meter=meter,
                snapshot=snapshot,
            )
        else:
            key = OperatorKey.find(str(sign_key), gnupghome)
            result = publish(
                mirror,
                out,
                base_url=url,
                keyring_name=keyring_name,
                key=key,
                upstream_keyring=None,
                epoch=epoch,
                info_cache=package_info_cache(),
                meter=meter,
                snapshot=snapshot,
            )
    if snapshot is not None:
        from mirror.publish.promote import record

        record(live, out)
    if json_output:
        output.emit_json(
            {
                "output": result.out,
                "snapshot": snapshot,
                "base_url": result.base_url,
                "signer": result.signer,
                "preserved_upstream": result.preserved_upstream,
                "files": result.files,
                "bytes": result.bytes,
                "linked": result.linked,
                "seconds": round(result.seconds, 3),
                "repos": [r.__dict__ for r in result.repos],
            }
        )
    elif not quiet:
        how = "upstream's signatures" if result.preserved_upstream else "re-signed"
        output.emit_lines(
            f"{r.key}: {r.packages} package(s), {r.bytes} bytes, {how} by {r.signed_by}" for r in result.repos
        )
        output.emit_lines(
            [
                f"published {out}{f' from snapshot {snapshot}' if snapshot else ''} for {result.base_url}: {result.files} file(s), {result.bytes} bytes "
                f"({result.linked} hard-linked); {result.seconds:.2f} s; node commands in {out / 'INSTALL.md'}"
            ]
        )


def _rollback(
    out: Path, sign_key: Optional[str], gnupghome: Optional[Path], *, json_output: bool, quiet: bool
) -> None:
    import time

    from mirror.publish.promote import describe, undo
    from mirror.publish.redate import for_rollback

    warn = (lambda _: None) if quiet else output.warn
    prepare = for_rollback(out, sign_key, gnupghome, at=lambda: int(time.time()), warn=warn)
    was, now = undo(out, prepare)
    if json_output:
        output.emit_json(
            {
                "output": str(out),
                "serving": (now or {}).get("snapshot"),
                "replaced": (was or {}).get("snapshot"),
            }
        )
    elif not quiet:
        output.emit_lines(
            [f"{out} serves {describe(now)} again (was {describe(was)}); --rollback again undoes this"]
        )
