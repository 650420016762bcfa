"""``gpu-airgap configure toolkit|cdi|runtimeclass|lxd|incus``: thin commands over the configure library.

Each command builds a :class:`~configure.engine.ConfigPlan` with the library, then either prints
its diff (``--dry-run``) or applies it through the journal, and renders the outcome (``--json``:
one object). Errors are :class:`~plumbing.errors.ToolError` and are printed by ``installer.cli.root.run``.
``configure/cli.py`` calls :func:`register_extras` to add these commands to the group.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import click
import typer

from configure import commands, runtimeclass, toolkit
from configure.cdi import spec as cdi_spec
from configure.cdi.node import plan_refresh, plan_static_spec
from configure.changes import read_optional, unified_diff
from configure.engine import ConfigPlan
from configure.lxc import lxd
from configure.validate import existing_root
from plumbing import proc
from plumbing.fsutil import rooted
from plumbing.output import emit_json, emit_lines, json_facts, warn
from plumbing.textio import decode_utf8

ROOT_HELP = "Treat DIR as the node's / (like dpkg --root); every node path is mapped under it."


def apply_plan(
    make_plan: Callable[[], ConfigPlan], root: Path, *, dry_run: bool
) -> Tuple[ConfigPlan, Dict[str, Any]]:
    """Plan and apply (both under the node lock), or only plan and diff; return the plan and what happened."""
    plan, written = commands.plan_and_write(make_plan, root, dry_run=dry_run)
    result: Dict[str, Any] = {
        "engine": plan.engine,
        "changed": plan.changed,
        "dry_run": dry_run,
        "facts": dict(plan.facts),
        "warnings": list(plan.warnings),
        "written": [str(p) for p in written],
    }
    if dry_run:
        result["diff"] = unified_diff(plan.changes)
    return plan, result


def render_result(result: Dict[str, Any], as_json: bool, **more: Any) -> None:
    """Print ``result``: warnings on stderr; the diff or written files and the facts on stdout (``more``: JSON only)."""
    for message in result["warnings"]:
        warn(message)
    if as_json:
        emit_json({**result, "facts": json_facts(result["facts"]), **more})
        return
    lines: List[str] = []
    if not result["changed"]:
        lines.append(f"{result['engine']}: already configured, nothing to change")
    elif result["dry_run"]:
        lines.append(result["diff"].rstrip("\n"))
    else:
        lines.extend(f"wrote {path}" for path in result["written"])
    lines.extend(f"{key}={value}" for key, value in result["facts"].items())
    emit_lines(lines)


_ROOT = typer.Option("/", "--root", metavar="DIR", help=ROOT_HELP, callback=existing_root)
_MODE = typer.Option(
    None,
    "--mode",
    click_type=click.Choice(toolkit.MODES),
    help=f"Runtime mode: {'|'.join(toolkit.MODES)}; without it, show the current mode.",
)
_DRY_RUN = typer.Option(False, "--dry-run", help="Print the diff instead of writing.")
_JSON = typer.Option(False, "--json", help="Print one JSON object.")
_CDI_OUTPUT = typer.Option(cdi_spec.CDI_SPEC, "--output", help="Node path of the CDI spec.")
_FORCE = typer.Option(False, "--force", help="Replace an existing spec, valid or not.")
_REFRESH = typer.Option(
    False, "--refresh", help="Regenerate the existing spec (one older than the driver: see status)."
)
_RC_NAME = typer.Option("nvidia", "--name", help="metadata.name of the RuntimeClass.")
_RC_HANDLER = typer.Option("nvidia", "--handler", help="The CRI runtime handler (the runtime's name).")
_RC_OUTPUT = typer.Option(None, "--output", metavar="FILE", help="Write here instead of stdout.")


def register_extras(app: typer.Typer) -> None:
    """Add the ``toolkit``, ``cdi``, ``runtimeclass``, ``lxd`` and ``incus`` commands to the ``configure`` group."""
    app.command("toolkit")(toolkit_command)
    app.command("cdi")(cdi_command)
    app.command("runtimeclass")(runtimeclass_command)
    app.command("lxd")(lxd_command)
    app.command("incus")(incus_command)


def toolkit_command(
    root: str = _ROOT, mode: Optional[str] = _MODE, dry_run: bool = _DRY_RUN, as_json: bool = _JSON
) -> None:
    """Set the runtime mode (nvidia-container-runtime.mode) in /etc/nvidia-container-runtime/config.toml, keeping the rest."""
    if mode is None:
        path = rooted(Path(root), toolkit.TOOLKIT_CONFIG)
        raw = read_optional(path)
        current = toolkit.current_mode(decode_utf8(raw, path), path) if raw is not None else None
        facts = {"MODE": current or "auto (default)"}
        emit_json({"facts": json_facts(facts)}) if as_json else emit_lines(
            f"{k}={v}" for k, v in facts.items()
        )
        return
    _plan, result = apply_plan(lambda: toolkit.plan_mode(Path(root), mode), Path(root), dry_run=dry_run)
    render_result(result, as_json)


def cdi_command(
    root: str = _ROOT,
    output: str = _CDI_OUTPUT,
    force: bool = _FORCE,
    refresh: bool = _REFRESH,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
) -> None:
    """Write a CDI spec for the GPUs (nvidia-ctk on /, else from /dev/nvidia* nodes); validate an existing one.

    Refused (exit 5) when nvidia-cdi-refresh is enabled or another spec defines nvidia.com/gpu: one spec per kind.
    """
    plan = plan_refresh if refresh else partial(plan_static_spec, force=force)
    _plan, result = apply_plan(lambda: plan(Path(root), output), Path(root), dry_run=dry_run)
    render_result(result, as_json)


def runtimeclass_command(
    name: str = _RC_NAME,
    handler: str = _RC_HANDLER,
    output: Optional[str] = _RC_OUTPUT,
    root: str = _ROOT,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
) -> None:
    """Write a RuntimeClass manifest (stdout without --output) and record its handler for verify."""
    plan, result = apply_plan(
        lambda: runtimeclass.plan_runtimeclass(Path(root), name, handler, output), Path(root), dry_run=dry_run
    )
    if as_json:  # the manifest, when it would go to stdout, is a field of the one object
        emitted = output is None and plan.facts.get("EMIT") != "false"
        render_result(result, True, manifest=runtimeclass.render_manifest(name, handler) if emitted else None)
        return
    if plan.facts.get("EMIT") == "false":
        for message in plan.warnings:
            warn(message)
        return
    if output is None:
        # stdout carries only the manifest, so it can be piped into kubectl apply -f -
        emit_lines([runtimeclass.render_manifest(name, handler).rstrip("\n")])
        return
    render_result(result, as_json=False)


_PROFILE = typer.Option("default", "--profile", help="The profile to give the GPUs.")
_CAPABILITIES = typer.Option("compute,utility", "--capabilities", help="nvidia.driver.capabilities.")
_APPLY = typer.Option(
    False, "--apply", help="Run the commands with the daemon's client instead of printing them."
)
_UNDO = typer.Option(False, "--undo", help="Take the settings out of the profile again.")


def lxd_command(
    profile: str = _PROFILE,
    capabilities: str = _CAPABILITIES,
    apply: bool = _APPLY,
    undo: bool = _UNDO,
    as_json: bool = _JSON,
) -> None:
    """Print (or --apply, through the lxc client) the LXD profile settings for the GPUs: nvidia.runtime, a gpu device."""
    _profile("lxd", profile, capabilities, apply, undo, as_json)


def incus_command(
    profile: str = _PROFILE,
    capabilities: str = _CAPABILITIES,
    apply: bool = _APPLY,
    undo: bool = _UNDO,
    as_json: bool = _JSON,
) -> None:
    """Print (or --apply, through the incus client) the Incus profile settings for the GPUs: nvidia.runtime, a gpu device."""
    _profile("incus", profile, capabilities, apply, undo, as_json)


def _profile(daemon: str, profile: str, capabilities: str, apply: bool, undo: bool, as_json: bool) -> None:
    """The daemon's own client changes its database; we never touch it."""
    if not apply:
        commands = (
            lxd.undo_commands(daemon, profile) if undo else lxd.setup_commands(daemon, profile, capabilities)
        )
        if as_json:
            emit_json({"daemon": daemon, "profile": profile, "commands": lxd.render(commands), "ran": []})
        else:
            emit_lines(lxd.render(commands))
        return
    current = lxd.current_profile(daemon, profile, _client_runner)
    commands = (
        lxd.undo_commands(daemon, profile, current)
        if undo
        else lxd.setup_commands(daemon, profile, capabilities, current)
    )
    done = lxd.apply(commands, _client_runner)
    if as_json:
        emit_json({"daemon": daemon, "profile": profile, "commands": lxd.render(commands), "ran": done})
        return
    emit_lines(
        [f"ran {line}" for line in done]
        or [f"{daemon}: the profile {profile} is already {'without' if undo else 'set up for'} the GPUs"]
    )


def _client_runner(argv: Sequence[str]) -> Tuple[int, str, str]:
    result = proc.run(argv, check=False, timeout=120)
    return (
        result.returncode,
        result.stdout.decode("utf-8", "replace"),
        result.stderr.decode("utf-8", "replace"),
    )
