"""``gpu-airgap mirror publish``: a thin typer command over :func:`mirror.publish.tree.publish`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from mirror.publish.files import DEFAULT_KEYRING_NAME, valid_keyring_name
from plumbing import output
from plumbing.errors import UsageError

_MIRROR = typer.Option(..., "--mirror", help="The mirror directory (from `gpu-airgap mirror sync`).")
_OUTPUT = typer.Option(
    ..., "--output", help="The directory to publish into (replaced atomically; served by your web server)."
)
_BASE_URL = typer.Option(
    ..., "--base-url", help="The URL nodes reach --output at, e.g. http://mirror.internal/nvct."
)
_SIGN_KEY = typer.Option(
    None, "--sign-key", help="The operator's secret key (fingerprint or key id) that signs the indexes."
)
_GNUPGHOME = typer.Option(None, "--gnupghome", help="gpg home holding the secret key.")
_PRESERVE = typer.Option(
    False,
    "--preserve-upstream",
    help="Publish upstream's own signed indexes unchanged (needs an unfiltered mirror).",
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
    mirror: Path = _MIRROR,
    out: Path = _OUTPUT,
    base_url: str = _BASE_URL,
    sign_key: Optional[str] = _SIGN_KEY,
    gnupghome: Optional[Path] = _GNUPGHOME,
    preserve_upstream: bool = _PRESERVE,
    keyring: Optional[Path] = _KEYRING,
    keyring_name: str = _KEYRING_NAME,
    json_output: bool = _JSON,
    quiet: bool = _QUIET,
) -> None:
    """Publish the mirror as a tree nodes' own apt and dnf trust (NVIDIA's layout at --base-url)."""
    from mirror.hostenv import build_epoch, package_info_cache
    from mirror.publish.swap import check_target
    from mirror.publish.tree import normalize_base_url, publish
    from mirror.signing import OperatorKey
    from mirror.store import MirrorState
    from mirror.trust import keyring_for
    from plumbing.gpg import check_key_file
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
            )
    if json_output:
        output.emit_json(
            {
                "output": result.out,
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
                f"published {out} for {result.base_url}: {result.files} file(s), {result.bytes} bytes "
                f"({result.linked} hard-linked); {result.seconds:.2f} s; node commands in {out / 'INSTALL.md'}"
            ]
        )
