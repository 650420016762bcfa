"""``gpu-airgap install | uninstall | status``: thin typer commands over :mod:`installer.install` and :mod:`installer.manage`.

Each command turns flags into options, calls the library with the real :class:`~installer.env.NodeEnv`
and renders the result (human lines, or one JSON object with ``--json``). Errors propagate to
:func:`installer.cli.root.run`, the one place that prints them. Annotations use ``typing.Optional``
because typer reads them at runtime on python3.9.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import click
import typer

from configure.validate import (
    CDI_CHOICES,
    DISTRO_CHOICES,
    RUNTIME_CHOICES,
    SERVICE_ENGINES,
    SYSTEMD_CGROUP_CHOICES,
    existing_root,
)
from installer.cli import oci
from installer.cli.bundle import ALLOW_EXPIRED, FINGERPRINT
from plumbing.errors import ExitCode
from plumbing.output import emit_json, emit_lines, json_facts

#: the last line of every dry run
DRY_RUN_DONE = "dry run: nothing was changed"
ROOT_HELP = "Treat DIR as the node's / (configs, dpkg/rpm database, state), like dpkg --root."


def _progress(line: str) -> None:
    sys.stderr.write(line + "\n")


_BUNDLE = typer.Argument(
    ..., help="The signed bundle (.tar, .tar.zst, the first of its parts, or oci://HOST/REPO:TAG|@sha256:…)."
)
_KEYRING = typer.Option(..., "--keyring", help="The operator's public key file; nothing else is trusted.")
_ROOT = typer.Option("/", "--root", metavar="DIR", help=ROOT_HELP, callback=existing_root)
_RUNTIME = typer.Option(
    "auto",
    "--runtime",
    click_type=click.Choice(RUNTIME_CHOICES),
    help="auto | containerd | docker | crio | podman | lxc | none",
)
_RUNTIME_NAME = typer.Option("nvidia", "--runtime-name", help="Name of the runtime entry.")
_SET_AS_DEFAULT = typer.Option(False, "--set-as-default", help="Make it the engine's default runtime.")
_CDI = typer.Option(
    "auto", "--cdi", click_type=click.Choice(CDI_CHOICES), help="auto (when a driver is present) | on | off"
)
_HOLD = typer.Option(False, "--hold", help="Keep the node on this release (dpkg hold / dnf versionlock).")
_ALLOW_HELD = typer.Option(
    False,
    "--allow-held",
    help="Change packages that are held (--hold, apt-mark hold, dnf versionlock); they stay held at the new version.",
)
_UNHOLD = typer.Option(False, "--unhold", help="Release the hold, so held packages change and stay unheld.")
_SYSTEMD_CGROUP = typer.Option(
    "auto",
    "--systemd-cgroup",
    click_type=click.Choice(SYSTEMD_CGROUP_CHOICES),
    help="containerd's SystemdCgroup: auto (follow the default runtime or the kubelet) | true | false",
)
_ALLOW_DOWNGRADE = typer.Option(
    False,
    "--allow-downgrade",
    help="Install over newer versions, or a bundle built before the installed one of the same release.",
)
_NO_RESTART = typer.Option(False, "--no-restart", help="Do not restart changed engines.")
_FIPS = typer.Option(
    False,
    "--fips",
    help="Check as for a node in FIPS mode (for a --root image; on / the kernel's fips_enabled says so).",
)
_DRY_RUN = typer.Option(False, "--dry-run", help="Print the plan and change nothing.")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_KEEP_PACKAGES = typer.Option(False, "--keep-packages", help="Restore the configuration only.")
_FORCE = typer.Option(
    False,
    "--force",
    help="Restore files even if they were edited since the install (each edit is kept as FILE.gpu-airgap-old).",
)
_PURGE = typer.Option(
    False,
    "--purge",
    help="Leave no config files: dpkg --purge, rpm's .rpmsave copies and the file the packages' scripts wrote.",
)
_UNINSTALL_DRY_RUN = typer.Option(
    False, "--dry-run", help="Print what would be restored, deleted and removed; change nothing."
)
_RESTART_RUNTIME = typer.Option(
    [],
    "--runtime",
    click_type=click.Choice(sorted(SERVICE_ENGINES)),
    help="Restart this engine instead of the pending ones; repeat.",
)
_DISTRO = typer.Option(
    None,
    "--distro",
    click_type=click.Choice(DISTRO_CHOICES),
    help="Which containerd the kubelet uses (default: detected).",
)
_TAKE_OVER = typer.Option(
    False, "--force", help="Take the runtime configuration over from the NVIDIA GPU Operator."
)
_STATUS_RUNTIME_NAME = typer.Option(
    "nvidia", "--runtime-name", help="Runtime to look for when nothing was recorded."
)


def add_node_commands(app: typer.Typer) -> None:
    """Register ``install``, ``uninstall``, ``restart`` and ``status`` on ``app``."""
    app.command("install")(install_command)
    app.command("uninstall")(uninstall_command)
    app.command("restart")(restart_command)
    app.command("status")(status_command)


def install_command(
    bundle: str = _BUNDLE,
    keyring: str = _KEYRING,
    root: str = _ROOT,
    runtime: str = _RUNTIME,
    runtime_name: str = _RUNTIME_NAME,
    set_as_default: bool = _SET_AS_DEFAULT,
    cdi: str = _CDI,
    hold: bool = _HOLD,
    allow_held: bool = _ALLOW_HELD,
    unhold: bool = _UNHOLD,
    allow_downgrade: bool = _ALLOW_DOWNGRADE,
    no_restart: bool = _NO_RESTART,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
    username: Optional[str] = oci.USERNAME,
    password_stdin: bool = oci.PASSWORD_STDIN,
    ca_file: Optional[str] = oci.CA_FILE,
    plain_http: bool = oci.PLAIN_HTTP,
    min_rate: int = oci.MIN_RATE,
    distro: Optional[str] = _DISTRO,
    force: bool = _TAKE_OVER,
    fingerprint: Optional[str] = FINGERPRINT,
    allow_expired: bool = ALLOW_EXPIRED,
    systemd_cgroup: str = _SYSTEMD_CGROUP,
    fips: bool = _FIPS,
) -> None:
    """Verify a bundle (a file or an oci:// artifact), check the node, install the toolkit and register the runtime."""
    # The library loads only when a command runs, so --help stays fast.
    from installer import install as install_lib
    from installer.env import NodeEnv, metered_opener
    from installer.plan import InstallOptions
    from plumbing.progress import terminal_meter

    options = InstallOptions(
        root=Path(root),
        runtime=runtime,
        runtime_name=runtime_name,
        set_as_default=set_as_default,
        cdi=cdi,
        hold=hold,
        allow_held=allow_held,
        unhold=unhold,
        allow_downgrade=allow_downgrade,
        no_restart=no_restart,
        dry_run=dry_run,
        distro=distro,
        force=force,
        fingerprint=fingerprint,
        allow_expired=allow_expired,
        systemd_cgroup=systemd_cgroup,
        fips=fips,
    )
    with oci.local_bundle(bundle, keyring, username, password_stdin, ca_file, plain_http, min_rate) as local:
        env = NodeEnv(
            log=_progress, opener=metered_opener(terminal_meter("verifying the bundle", quiet=as_json))
        )
        result = install_lib.install(local, Path(keyring), options, env)
    if as_json:
        emit_json(result.to_dict())
    else:
        lines: List[str] = [
            f"{result.outcome}: bundle {result.bundle_id[:16]}… for {result.target} on {result.node}",
            f"  signed by {result.signer}; {result.age}, "
            + (f"expires {result.expires}" if result.expires else "no expiry"),
        ]
        lines += [f"  {m}" for m in result.messages]
        lines += [f"  {name}: {what}" for name, what in result.engines.items()]
        lines.append(f"  CDI: {result.cdi}")
        if result.cdi_report:
            lines.append(f"  CDI source: {result.cdi_source}: {result.cdi_report['summary']}")
        emit_lines(lines)
        if result.diff:
            sys.stdout.write(result.diff)
        if result.outcome == "dry-run":
            emit_lines([DRY_RUN_DONE])  # last: after the plan and the diff
    if result.failed_engines:
        raise install_lib.EngineRestartFailed(result.failed_engines)


def uninstall_command(
    root: str = _ROOT,
    keep_packages: bool = _KEEP_PACKAGES,
    force: bool = _FORCE,
    dry_run: bool = _UNINSTALL_DRY_RUN,
    as_json: bool = _JSON,
    purge: bool = _PURGE,
) -> None:
    """Restore every configuration file the install changed and remove the packages."""
    from installer import manage
    from installer.env import NodeEnv

    result = manage.uninstall(
        Path(root),
        NodeEnv(log=_progress),
        keep_packages=keep_packages,
        force=force,
        dry_run=dry_run,
        purge=purge,
    )
    if as_json:
        emit_json(result.to_dict())
    else:
        would = "would " if dry_run else ""
        lines = [
            f"{would}{'delete' if dry_run else 'deleted'} {path} (the install had created it)"
            if path in result.deleted
            else f"{would}{'restore' if dry_run else 'restored'} {path}"
            for path in result.restored
        ]
        lines += [
            f"{would}keep your edit of {path} as {copy}" if dry_run else f"kept your edit of {path} as {copy}"
            for path, copy in result.kept.items()
        ]
        lines += [f"{would}{'remove' if dry_run else 'removed'} {name}" for name in result.removed]
        lines += result.messages
        lines += [DRY_RUN_DONE] if dry_run else []
        emit_lines(lines or ["nothing was changed"])
    if result.failed_engines:
        raise manage.EngineNotRunning(result.failed_engines)


def restart_command(
    root: str = _ROOT,
    runtime: List[str] = _RESTART_RUNTIME,
    as_json: bool = _JSON,
    distro: Optional[str] = _DISTRO,
) -> None:
    """Restart the engines an `install --no-restart` changed; put back the config of any that stays down."""
    from installer import install as install_lib
    from installer import manage
    from installer.env import NodeEnv

    result = manage.restart_pending(Path(root), NodeEnv(log=_progress), runtime or None, distro)
    if as_json:
        emit_json(result.to_dict())
    else:
        emit_lines([result.outcome, *(f"  {name}: {what}" for name, what in result.engines.items())])
    if result.failed_engines:
        raise install_lib.EngineRestartFailed(result.failed_engines)


def status_command(
    root: str = _ROOT,
    runtime_name: str = _STATUS_RUNTIME_NAME,
    as_json: bool = _JSON,
    distro: Optional[str] = _DISTRO,
) -> int:
    """Show the installed toolkit, registered runtimes and drift from the last install (exit 9 on drift)."""
    from installer import manage
    from installer.env import NodeEnv

    report = manage.status(Path(root), NodeEnv(), runtime_name, distro)
    if as_json:
        emit_json(
            {**report, "engines": {name: json_facts(facts) for name, facts in report["engines"].items()}}
        )
    else:
        emit_lines(_status_lines(report))
    return int(ExitCode.PROBLEMS_FOUND if report["problems"] else ExitCode.OK)


def _status_lines(report: Dict[str, Any]) -> List[str]:
    lines = [f"node: {report['node']}"]
    if report["installed_by_gpu_airgap"]:
        lines.append(
            f"bundle: {report['bundle_id']} (release {report['release']}, signed by {report['signer']}"
            + (f", built {report['built']})" if report.get("built") else ")")
        )
        if report.get("release_candidate"):
            from installer.freshness import RELEASE_CANDIDATE_NOTE

            lines.append(f"  {RELEASE_CANDIDATE_NOTE}")
    else:
        lines.append("bundle: no install recorded by gpu-airgap")
    for name, version in report["packages"].items():
        origin = report.get("origins", {}).get(name)
        lines.append(
            f"  {name}: {version or 'not installed'}"
            + (f" (from {origin})" if origin else "")
            + (" (held)" if report["held"] and version else "")
        )
    for engine, facts in report["engines"].items():
        runtime = facts.get("RUNTIME") or "not registered"
        pending = (
            " (restart pending: `gpu-airgap restart`)" if engine in report.get("restart_pending", []) else ""
        )
        of = f" of {facts['DISTRO']}" if facts.get("DISTRO") not in (None, "containerd") else ""
        lines.append(
            f"  {engine}{of}: runtime {runtime}"
            + (f", default {facts['DEFAULT']}" if facts.get("DEFAULT") else "")
            + pending
        )
        if facts.get("OWNER"):
            lines.append(f"  {engine}: the runtime configuration is managed by {facts['OWNER']}")
    cdi = report["cdi"]
    lines.append(
        f"  CDI {cdi['path']}: " + ("valid" if cdi["valid"] else "invalid" if cdi["present"] else "absent")
    )
    lines.append(f"  CDI source: {cdi['source']}: {cdi['summary']}")
    lines.append(f"  driver root: {cdi['driver_root']}")
    if report["problems"]:
        lines += [f"problem: {p}" for p in report["problems"]]
    elif report["installed_by_gpu_airgap"]:
        lines.append("no drift from the recorded install")
    else:  # "no drift from the recorded install" would contradict "no install recorded" above
        lines.append("nothing to check for drift: gpu-airgap has recorded no install here")
    return lines
