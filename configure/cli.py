"""``gpu-airgap configure ...``: a thin typer layer over the configure library.

Each command builds objects, calls the library and renders the result; it makes no decisions.
CLI style (every CLI module): options are module-level ``typer.Option`` defaults, commands are
module-level functions, and one registration function adds them to their group. Signatures use
``typing.Optional``/``List`` because typer evaluates annotations at runtime on python3.9.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional

import click
import typer

from configure import commands, live, report, runtimeclass, toolkit
from configure.cdi import spec as cdi_spec
from configure.cdi.node import cdi_report
from configure.cli_extras import register_extras
from configure.distros.detection import NAMES as DISTROS
from configure.engine import RuntimeOptions
from configure.engines import KNOWN, get_engine
from configure.validate import CDI_CHOICES, existing_root
from plumbing.clikit import Group
from plumbing.errors import ProblemsFound, UsageError
from plumbing.output import emit_json, emit_lines, json_facts, note, warn

app = typer.Typer(
    cls=Group,
    help="Register the NVIDIA runtime with containerd, Docker or CRI-O; give Podman and LXC the GPUs; write CDI specs and RuntimeClasses.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


class SystemdCgroup(str, Enum):
    """``--systemd-cgroup``: follow the default runtime / kubelet, or force a value."""

    auto = "auto"
    true = "true"
    false = "false"


ROOT_HELP = "Treat DIR as the node's / (like dpkg --root); every path is mapped under it."

_ROOT = typer.Option(Path("/"), "--root", metavar="DIR", help=ROOT_HELP, callback=existing_root)
_CONFIG = typer.Option(None, "--config", metavar="PATH", help="Main config file (node path).")
_DROP_IN = typer.Option(None, "--drop-in", metavar="PATH", help="Write our settings to this drop-in.")
_NO_DROP_IN = typer.Option(False, "--no-drop-in", help="Edit the main config in place.")
_RUNTIME_NAME = typer.Option(
    "nvidia", "--runtime-name", help="Name of the runtime (and RuntimeClass handler)."
)
_RUNTIME_PATH = typer.Option(
    "/usr/bin/nvidia-container-runtime", "--runtime-path", help="The runtime binary."
)
_SET_AS_DEFAULT = typer.Option(False, "--set-as-default", help="Make it the default runtime (not advised).")
_CDI = typer.Option(
    "off",
    "--cdi",
    click_type=click.Choice(CDI_CHOICES),
    help="Enable CDI in the engine: on | off | auto (when an NVIDIA driver is present), as for install "
    "(`configure cdi` writes the spec).",
)
_SYSTEMD_CGROUP = typer.Option(SystemdCgroup.auto, "--systemd-cgroup", help="SystemdCgroup value.")
_DRY_RUN = typer.Option(False, "--dry-run", help="Print the diff of every file; write nothing.")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_HOOK = typer.Option(False, "--hook", help="CRI-O/podman: write the OCI hook instead.")
_DISTRO = typer.Option(
    None,
    "--distro",
    click_type=click.Choice(DISTROS),
    help="Which containerd the kubelet uses (default: detected from the files under --root).",
)
_TAKE_OVER = typer.Option(
    False, "--force", help="Take the runtime configuration over from the NVIDIA GPU Operator."
)


def add_configure_commands(group: typer.Typer) -> None:
    """Register the engine commands, ``report``, ``verify``, ``revert`` and the extras on ``group``."""
    # --cdi was a flag; written bare it still means on, for one release (plumbing.spellings)
    group.command("containerd")(containerd_command)
    group.command("docker")(docker_command)
    group.command("crio")(crio_command)
    group.command("podman")(podman_command)
    group.command("lxc")(lxc_command)
    group.command("report")(report_command)
    group.command("verify")(verify_command)
    group.command("revert")(revert_command)
    # toolkit, cdi, runtimeclass (engines branch): the single line where the extra commands join.
    register_extras(group)


def containerd_command(
    root: Path = _ROOT,
    config: Optional[str] = _CONFIG,
    drop_in: Optional[str] = _DROP_IN,
    no_drop_in: bool = _NO_DROP_IN,
    runtime_name: str = _RUNTIME_NAME,
    runtime_path: str = _RUNTIME_PATH,
    set_as_default: bool = _SET_AS_DEFAULT,
    cdi: str = _CDI,
    systemd_cgroup: SystemdCgroup = _SYSTEMD_CGROUP,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
    distro: Optional[str] = _DISTRO,
    force: bool = _TAKE_OVER,
) -> None:
    """Register the NVIDIA runtime with containerd (backups kept; `configure revert` undoes it).

    On k3s, RKE2, MicroK8s and k0s it writes where that distribution reads (see docs/engines.md).
    """
    options = RuntimeOptions(
        root=root,
        config=config,
        drop_in=drop_in,
        no_drop_in=no_drop_in,
        runtime_name=runtime_name,
        runtime_path=runtime_path,
        set_as_default=set_as_default,
        cdi=commands.cdi_in_engine(cdi, root),
        systemd_cgroup=systemd_cgroup.value,
        distro=distro,
        force=force,
    )
    _configure("containerd", options, dry_run, as_json)


def docker_command(
    root: Path = _ROOT,
    config: Optional[str] = _CONFIG,
    drop_in: Optional[str] = _DROP_IN,
    no_drop_in: bool = _NO_DROP_IN,
    runtime_name: str = _RUNTIME_NAME,
    runtime_path: str = _RUNTIME_PATH,
    set_as_default: bool = _SET_AS_DEFAULT,
    cdi: str = _CDI,
    systemd_cgroup: SystemdCgroup = _SYSTEMD_CGROUP,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
) -> None:
    """Register the NVIDIA runtime with docker (backups kept; `configure revert` undoes it)."""
    options = RuntimeOptions(
        root=root,
        config=config,
        drop_in=drop_in,
        no_drop_in=no_drop_in,
        runtime_name=runtime_name,
        runtime_path=runtime_path,
        set_as_default=set_as_default,
        cdi=commands.cdi_in_engine(cdi, root),
        systemd_cgroup=systemd_cgroup.value,
    )
    _configure("docker", options, dry_run, as_json)


def crio_command(
    root: Path = _ROOT,
    config: Optional[str] = _CONFIG,
    drop_in: Optional[str] = _DROP_IN,
    no_drop_in: bool = _NO_DROP_IN,
    runtime_name: str = _RUNTIME_NAME,
    runtime_path: str = _RUNTIME_PATH,
    set_as_default: bool = _SET_AS_DEFAULT,
    cdi: str = _CDI,
    systemd_cgroup: SystemdCgroup = _SYSTEMD_CGROUP,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
    hook: bool = _HOOK,
) -> None:
    """Register the NVIDIA runtime with crio (backups kept; `configure revert` undoes it)."""
    options = RuntimeOptions(
        root=root,
        config=config,
        drop_in=drop_in,
        no_drop_in=no_drop_in,
        runtime_name=runtime_name,
        runtime_path=runtime_path,
        set_as_default=set_as_default,
        cdi=commands.cdi_in_engine(cdi, root),
        systemd_cgroup=systemd_cgroup.value,
        hook=hook,
    )
    _configure("crio", options, dry_run, as_json)


_PODMAN_HOOK = typer.Option(
    False, "--hook", help="Write the OCI hook instead of using CDI (podman before 4.1 always does)."
)
_HOOKS_DIR = typer.Option(
    None,
    "--hooks-dir",
    metavar="DIR",
    help="--hook: write it here (default: the strongest directory podman reads).",
)


_USER = typer.Option(
    None, "--user", metavar="NAME", help="Rootless: configure NAME's podman (their ~/.config/containers)."
)


def podman_command(
    root: Path = _ROOT,
    hook: bool = _PODMAN_HOOK,
    hooks_dir: Optional[str] = _HOOKS_DIR,
    user: Optional[str] = _USER,
    runtime_path: str = _RUNTIME_PATH,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
) -> None:
    """Give podman the GPUs: the CDI spec it loads (written when none is valid), or NVIDIA's OCI hook."""
    if hooks_dir is not None and not hook:
        raise UsageError("--hooks-dir belongs to --hook")
    options = RuntimeOptions(
        root=root, runtime_path=runtime_path, cdi=True, hook=hook, hooks_dir=hooks_dir, user=user
    )
    _configure("podman", options, dry_run, as_json)


_CONTAINER = typer.Option(
    ..., "--container", metavar="NAME", help="The LXC container (unprivileged) to give the GPUs."
)
_LXCPATH = typer.Option(
    None, "--lxcpath", metavar="DIR", help="Where the containers are (lxc-start -P; default /var/lib/lxc)."
)
_DEVICES = typer.Option(
    "all", "--visible-devices", metavar="DEVICES", help="NVIDIA_VISIBLE_DEVICES: all, or 0,1,..."
)
_CAPABILITIES = typer.Option("compute,utility", "--capabilities", help="NVIDIA_DRIVER_CAPABILITIES.")


def lxc_command(
    container: str = _CONTAINER,
    root: Path = _ROOT,
    lxcpath: Optional[str] = _LXCPATH,
    devices: str = _DEVICES,
    capabilities: str = _CAPABILITIES,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
) -> None:
    """Add LXC's nvidia mount hook and its environment to an unprivileged container's config (revert removes them)."""
    options = RuntimeOptions(
        root=root, container=container, lxcpath=lxcpath, devices=devices, capabilities=capabilities
    )
    _configure("lxc", options, dry_run, as_json)


def _configure(engine_name: str, options: RuntimeOptions, dry_run: bool, as_json: bool) -> None:
    """The one implementation behind ``configure containerd|docker|crio``."""
    result = commands.configure_engine(get_engine(engine_name), options, dry_run=dry_run)
    plan = result.plan
    if as_json:
        emit_json(
            {
                "engine": plan.engine,
                "dry_run": dry_run,
                "already_configured": result.already_configured,
                "changed": [str(c.path) for c in plan.changes if c.changed],
                "written": [str(p) for p in result.written],
                "warnings": plan.warnings,
                "facts": json_facts(plan.facts),
                "diff": result.diff if dry_run else "",
            }
        )
        return
    for message in plan.warnings:
        warn(message)
    if result.already_configured and plan.notes.get("agent_registers"):
        emit_lines(
            [f"nothing written: {plan.facts['DISTRO']} registers the runtime itself; {plan.facts['RESTART']}"]
        )
    elif result.already_configured:
        what = plan.next_step or f"{engine_name} has the {options.runtime_name} runtime"
        emit_lines([f"already configured: {what}; nothing written"])
    elif dry_run:
        emit_lines([result.diff.rstrip("\n"), f"dry run: nothing written ({engine_name})"])
    else:
        lines = [f"wrote {path}" for path in result.written]
        if plan.next_step:
            lines.append(f"configured {engine_name}: {plan.next_step}")
        else:
            restart = plan.facts.get("RESTART", "restart it")
            lines.append(f"configured {engine_name} for the {options.runtime_name} runtime: {restart}")
        emit_lines(lines)


#: what ``configure revert --runtime`` can name: the engines and the other files configure writes
REVERTIBLE = (*KNOWN, cdi_spec.ENGINE, toolkit.ENGINE, runtimeclass.ENGINE)

_REPORT_RUNTIME = typer.Option(
    "containerd",
    "--runtime",
    click_type=click.Choice(KNOWN),
    help="Engine to read back: containerd, docker, crio, podman or lxc.",
)
_REPORT_RUNTIME_NAME = typer.Option(
    None, "--runtime-name", help="Runtime to describe (default: as configured)."
)
_REPORT_CONFIG = typer.Option(
    None, "--config", metavar="PATH", help="Main config to read (default: the one configure edited)."
)
_VERIFY_RUNTIME = typer.Option(
    None, "--runtime", click_type=click.Choice(KNOWN), help="Engine(s) to check (default: those configured)."
)
_REVERT_RUNTIME = typer.Option(
    None,
    "--runtime",
    click_type=click.Choice(REVERTIBLE),
    help="What to restore, repeatable (default: all changed).",
)
_FORCE = typer.Option(
    False,
    "--force",
    help="Restore even files edited after gpu-airgap wrote them (the edit is kept as FILE.gpu-airgap-old).",
)
_REVERT_DRY_RUN = typer.Option(
    False, "--dry-run", help="Print what would be restored and deleted; change nothing."
)


_ALL = typer.Option(False, "--all", help="Print every fact, not only the walk-through's five lines.")
_EVIDENCE = typer.Option(
    None,
    "--evidence",
    metavar="DIR",
    help="Also write the walk-through's evidence files into DIR (report.txt, default.txt, parsed.txt, cdi-keys.txt, runtimeclass.yaml).",
)


def report_command(
    root: Path = _ROOT,
    runtime: str = _REPORT_RUNTIME,
    runtime_name: Optional[str] = _REPORT_RUNTIME_NAME,
    config: Optional[str] = _REPORT_CONFIG,
    as_json: bool = _JSON,
    distro: Optional[str] = _DISTRO,
    every: bool = _ALL,
    evidence: Optional[Path] = _EVIDENCE,
) -> None:
    """Print the runtime configuration read back from the files on disk: the walk-through's five KEY=value lines.

    CONFIG_VERSION, RUNTIME, RUNTIME_TYPE, SYSTEMD_CGROUP and HANDLER; --all or --json for every fact.
    """
    facts = commands.report(commands.engine_for(runtime, distro), root, runtime_name, config)
    gathered = written = None
    if evidence is not None:
        gathered = report.gather(root, facts)
        written = report.write(evidence, gathered)
    if as_json:
        data = json_facts(facts)
        if gathered is not None and written is not None:
            data["evidence"] = {
                "dir": str(evidence),
                "written": [str(p) for p in written],
                "problems": gathered.problems,
            }
        emit_json(data)
    else:
        emit_lines(report.report_lines(facts, every=every))
        if written:
            note(f"evidence in {evidence}: {', '.join(p.name for p in written)}")
    if gathered is not None and gathered.problems:
        raise ProblemsFound(f"the evidence in {evidence} is incomplete", gathered.problems)


_LIVE = typer.Option(
    False, "--live", help="Also start a throwaway container through the runtime on the running engine."
)
_ADDRESS = typer.Option(None, "--address", metavar="SOCKET", help="--live: the engine's socket (one engine).")
_IMAGE = typer.Option(None, "--image", help="--live: an image already on the node (never pulled).")
_VISIBLE_DEVICES = typer.Option(
    None, "--visible-devices", metavar="DEVICES", help="--live: ask for GPUs (all, nvidia.com/gpu=all)."
)
_TIMEOUT = typer.Option(60.0, "--timeout", help="--live: seconds per engine command.")


def verify_command(
    root: Path = _ROOT,
    runtime: Optional[List[str]] = _VERIFY_RUNTIME,
    as_json: bool = _JSON,
    live_run: bool = _LIVE,
    address: Optional[str] = _ADDRESS,
    image: Optional[str] = _IMAGE,
    visible_devices: Optional[str] = _VISIBLE_DEVICES,
    timeout: float = _TIMEOUT,
    distro: Optional[str] = _DISTRO,
) -> None:
    """Check the handler, the runtime binary, the default runtime and the CDI spec; list every problem.

    With --live, then start a throwaway container through the registered runtime on each engine.
    """
    if not live_run and (address or image or visible_devices):
        raise UsageError("--address, --image and --visible-devices belong to --live")
    cdi = cdi_report(root)  # read once: verify's CDI checks use the same report
    result: Dict[str, Any] = {"ok": True, "passed": [], "problems": [], "cdi": cdi.to_dict()}
    try:
        result["passed"] = commands.verify(root, runtime or None, distro, cdi)
    except ProblemsFound as exc:
        result.update(ok=False, problems=exc.problems)
        if as_json:
            emit_json(result)
        else:
            emit_lines(f"PROBLEM: {problem}" for problem in exc.problems)
        raise
    lines = [f"ok: {line}" for line in result["passed"]]
    results: List[live.LiveResult] = []
    if live_run:
        options = live.LiveOptions(address, image, visible_devices, timeout)
        results = live.live_check(root, runtime or None, options, live.ProcRunner())
        result["live"] = live.as_json(results)
        result["ok"] = all(r.outcome is live.Outcome.RAN for r in results)
        lines.extend(live.render(results))
    if as_json:
        emit_json(result)
    else:
        emit_lines(lines)
    live.raise_for(results)


def revert_command(
    root: Path = _ROOT,
    runtime: Optional[List[str]] = _REVERT_RUNTIME,
    force: bool = _FORCE,
    dry_run: bool = _REVERT_DRY_RUN,
    as_json: bool = _JSON,
) -> None:
    """Restore every file configure changed, byte for byte, from the journaled backups."""
    result = commands.revert_engines(root, runtime or None, force=force, dry_run=dry_run)
    if as_json:
        emit_json(result.to_dict())
        return
    verbs = (
        {"restore": "would restore", "delete": "would delete", "keep": "would keep"}
        if dry_run
        else {"restore": "restored", "delete": "deleted", "keep": "kept"}
    )
    lines = [
        f"{verbs['restore']} {r.path}"
        if r.action == "restore"
        else f"{verbs['delete']} {r.path} (gpu-airgap had created it)"
        for r in result.plan.restores
    ]
    lines += [f"{verbs['keep']} your edit of {path} as {copy}" for path, copy in result.outcome.kept.items()]
    lines.append("dry run: nothing was changed" if dry_run else "reverted: restart the engine(s) to apply")
    emit_lines(lines)


add_configure_commands(app)
