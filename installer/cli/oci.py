"""``gpu-airgap bundle push|pull`` and the registry options ``install oci://…`` shares: thin typer glue over :mod:`installer.oci`.

The options become a :class:`~installer.oci.client.RegistryAccess` here (``--password-stdin``
reads stdin, Docker's config is consulted when no ``--username`` is given); the library does the
rest and errors propagate to :func:`installer.cli.root.run`. Annotations use ``typing.Optional``
because typer reads them at runtime on python3.9.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import typer

from installer.cli.bundle import ALLOW_EXPIRED, FINGERPRINT, bundle_facts
from plumbing import output, output_target, rate
from plumbing.clikit import emit_report, refuse_json_to_stdout
from plumbing.errors import UsageError

if TYPE_CHECKING:
    from installer.oci.client import RegistryAccess

USERNAME = typer.Option(
    None, "--username", help="Registry user (default: from $DOCKER_CONFIG or ~/.docker/config.json)."
)
PASSWORD_STDIN = typer.Option(
    False, "--password-stdin", help="Read the registry password (or token) from stdin."
)
CA_FILE = typer.Option(None, "--ca-file", help="PEM file of the CA that signed the registry's certificate.")
PLAIN_HTTP = typer.Option(
    False,
    "--plain-http",
    "--insecure-http",
    help="Speak plain http to the registry (loopback registries need not).",
)
MIN_RATE = typer.Option(
    rate.DEFAULT_MIN_RATE,
    "--min-rate",
    min=0,
    metavar="BYTES",
    help=f"Abandon a registry download slower than this many bytes/s over {rate.WINDOW:.0f} s (0: never).",
)
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_PUSH_FILE = typer.Argument(..., help="The bundle file, or FILE.part001 of a split bundle.")
_PUSH_TO = typer.Argument(..., metavar="oci://HOST[:PORT]/REPO:TAG", help="Where to store it.")
_PULL_FROM = typer.Argument(
    ..., metavar="oci://HOST[:PORT]/REPO:TAG|@sha256:DIGEST", help="The bundle to fetch."
)
_OUTPUT = typer.Option(..., "--output", help="The bundle file to write, or an existing directory.")
_KEYRING = typer.Option(..., "--keyring", help="The operator's public key file; the only key trusted.")


def _progress(line: str) -> None:
    sys.stderr.write(line + "\n")


def registry_access(
    host: str,
    username: Optional[str],
    password_stdin: bool,
    ca_file: Optional[str],
    plain_http: bool,
    min_rate: float = rate.DEFAULT_MIN_RATE,
) -> RegistryAccess:
    """Turn the registry options into a :class:`RegistryAccess` for ``host``.

    :raises UsageError: ``--username`` without ``--password-stdin`` or the other way round.
    """
    from installer.oci.client import RegistryAccess
    from installer.oci.credentials import Credentials, from_docker_config

    if bool(username) != password_stdin:
        raise UsageError("--username and --password-stdin go together (the password is read from stdin)")
    if username:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise UsageError("--password-stdin read an empty password")
        credentials: Optional[Credentials] = Credentials(username=username, password=password)
    else:
        credentials = from_docker_config(host, os.environ)
    if ca_file is not None and not Path(ca_file).is_file():
        raise UsageError(f"the CA file {ca_file} does not exist")
    return RegistryAccess(
        credentials=credentials,
        ca_file=Path(ca_file) if ca_file else None,
        plain_http=plain_http,
        min_rate=min_rate,
    )


@contextlib.contextmanager
def local_bundle(
    bundle: str,
    keyring: str,
    username: Optional[str],
    password_stdin: bool,
    ca_file: Optional[str],
    plain_http: bool,
    min_rate: float = rate.DEFAULT_MIN_RATE,
) -> Iterator[Path]:
    """The bundle file to install: ``bundle`` itself, or an ``oci://`` artifact pulled into a private spool directory."""
    from installer.oci import is_oci_reference

    if not is_oci_reference(bundle):
        if username or password_stdin or ca_file or plain_http:
            raise UsageError(
                "--username, --password-stdin, --ca-file and --plain-http apply only to an oci:// bundle"
            )
        yield Path(bundle)
        return
    from installer.oci.reference import parse_reference
    from installer.oci.transfer import fetched
    from plumbing.keyfile import check_key_file

    ref = parse_reference(bundle)
    check_key_file(keyring)  # before the download, not after it
    access = registry_access(ref.host, username, password_stdin, ca_file, plain_http, min_rate)
    with fetched(ref, access, _progress) as pulled:
        yield pulled.entry


def add_oci_commands(app: typer.Typer) -> None:
    """Register ``push`` and ``pull`` on the ``bundle`` group."""
    app.command("push")(push_command)
    app.command("pull")(pull_command)


def push_command(
    file: Path = _PUSH_FILE,
    reference: str = _PUSH_TO,
    keyring: Path = _KEYRING,
    username: Optional[str] = USERNAME,
    password_stdin: bool = PASSWORD_STDIN,
    ca_file: Optional[str] = CA_FILE,
    plain_http: bool = PLAIN_HTTP,
    fingerprint: Optional[str] = FINGERPRINT,
    allow_expired: bool = ALLOW_EXPIRED,
    json_output: bool = _JSON,
) -> None:
    """Verify a bundle with the operator key and store it in an OCI registry; print the manifest digest."""
    from installer.bundle import require_bundle
    from installer.freshness import Policy
    from installer.oci.client import RegistryClient
    from installer.oci.reference import parse_reference
    from installer.oci.transfer import push_bundle
    from plumbing.keyfile import check_key_file

    ref = parse_reference(reference)
    require_bundle(file)
    check_key_file(keyring)
    client = RegistryClient.for_reference(
        ref, registry_access(ref.host, username, password_stdin, ca_file, plain_http)
    )
    policy = Policy(allow_expired=allow_expired)
    result = push_bundle(file, ref, keyring, client, _progress, fingerprint=fingerprint, policy=policy)
    if json_output:
        output.emit_json(result.to_dict())
        return
    sent = sum(layer.size for layer in result.layers if layer.digest in result.uploaded)
    output.emit_lines(
        [
            f"pushed {file.name} to {ref} ({len(result.layers)} layer(s), {sent} bytes uploaded)",
            f"digest: {result.digest}",
            f"pull by digest: {ref.pinned(result.digest)}",
        ]
    )


def pull_command(
    reference: str = _PULL_FROM,
    output_path: Path = _OUTPUT,
    keyring: Path = _KEYRING,
    username: Optional[str] = USERNAME,
    password_stdin: bool = PASSWORD_STDIN,
    ca_file: Optional[str] = CA_FILE,
    plain_http: bool = PLAIN_HTTP,
    fingerprint: Optional[str] = FINGERPRINT,
    allow_expired: bool = ALLOW_EXPIRED,
    min_rate: int = MIN_RATE,
    json_output: bool = _JSON,
) -> None:
    """Fetch a bundle from an OCI registry by digest and verify it like `bundle verify`; write it only if it verifies."""
    from installer.freshness import Policy
    from installer.oci.reference import parse_reference
    from installer.oci.transfer import pull_verified
    from plumbing.keyfile import check_key_file

    ref = parse_reference(reference)
    check_key_file(keyring)
    if not output_path.is_dir() and not output_path.parent.is_dir():
        raise UsageError(f"the directory of --output {output_path} does not exist")
    refuse_json_to_stdout(json_output, output_path)
    access = registry_access(ref.host, username, password_stdin, ca_file, plain_http, min_rate)
    policy = Policy(allow_expired=allow_expired)
    if output_path.is_dir():
        result = pull_verified(
            ref, output_path, keyring, access, _progress, fingerprint=fingerprint, policy=policy
        )
    else:  # a file, or a device or pipe the verified bundle is streamed into
        with output_target.output_path(output_path) as target:
            result = pull_verified(
                ref, target, keyring, access, _progress, fingerprint=fingerprint, policy=policy
            )
        if target != output_path:
            result = dataclasses.replace(
                result, pulled=dataclasses.replace(result.pulled, entry=output_path, files=(output_path,))
            )
    pulled, report = result.pulled, result.report
    if json_output:
        data = report.to_dict()
        data.update(
            reference=str(ref),
            digest=pulled.digest,
            pinned=str(pulled.pinned),
            files=[str(f) for f in pulled.files],
        )
        data["bundle"] = str(pulled.entry)
        output.emit_json(data)
        return
    emit_report(
        [
            f"OK: {pulled.entry} from {pulled.pinned} is signed by {report.signer}; "
            f"{report.members_checked} members, {report.bytes_checked} bytes checked",
            *bundle_facts(report.facts()),
            *(f"wrote {path}" for path in pulled.files),
        ],
        output_path,
    )
