"""``gpu-airgap configure ...``: a thin typer layer over the configure library.

Each command builds objects, calls the library and renders the result; it makes no decisions.
Signatures use ``typing.Optional``/``List`` because typer evaluates annotations at runtime and
this module must import on python3.9. No ``from __future__ import annotations`` here: the engine
command is built in a closure, and typer must see its annotations evaluated.
"""

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Dict, List, Optional

import typer

from configure import commands
from configure.cli_extras import register_extras
from configure.engine import RuntimeOptions
from configure.engines import KNOWN, get_engine
from plumbing.errors import ProblemsFound
from plumbing.output import emit_json, emit_lines, warn

app = typer.Typer(
    help="Register the NVIDIA runtime with containerd, Docker or CRI-O; write CDI specs and RuntimeClasses.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


class SystemdCgroup(str, Enum):
    """``--systemd-cgroup``: follow the default runtime / kubelet, or force a value."""

    auto = "auto"
    true = "true"
    false = "false"


ROOT_HELP = "Treat DIR as the node's / (like dpkg --root); every path is mapped under it."


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
                "facts": plan.facts,
                "diff": result.diff if dry_run else "",
            }
        )
        return
    for message in plan.warnings:
        warn(message)
    if result.already_configured:
        emit_lines(
            [f"already configured: {engine_name} has the {options.runtime_name} runtime; nothing written"]
        )
    elif dry_run:
        emit_lines([result.diff.rstrip("\n"), f"dry run: nothing written ({engine_name})"])
    else:
        lines = [f"wrote {path}" for path in result.written]
        lines.append(f"configured {engine_name}: restart it to use the {options.runtime_name} runtime")
        emit_lines(lines)


def _engine_command(engine_name: str, *, with_hook: bool) -> Callable[..., None]:
    def command(
        root: Annotated[Path, typer.Option("--root", metavar="DIR", help=ROOT_HELP)] = Path("/"),
        config: Annotated[
            Optional[str], typer.Option("--config", metavar="PATH", help="Main config file (node path).")
        ] = None,
        drop_in: Annotated[
            Optional[str],
            typer.Option("--drop-in", metavar="PATH", help="Write our settings to this drop-in."),
        ] = None,
        no_drop_in: Annotated[
            bool, typer.Option("--no-drop-in", help="Edit the main config in place.")
        ] = False,
        runtime_name: Annotated[
            str, typer.Option("--runtime-name", help="Name of the runtime (and RuntimeClass handler).")
        ] = "nvidia",
        runtime_path: Annotated[
            str, typer.Option("--runtime-path", help="The runtime binary.")
        ] = "/usr/bin/nvidia-container-runtime",
        set_as_default: Annotated[
            bool, typer.Option("--set-as-default", help="Make it the default runtime (not advised).")
        ] = False,
        cdi: Annotated[bool, typer.Option("--cdi", help="Enable CDI in the engine.")] = False,
        systemd_cgroup: Annotated[
            SystemdCgroup, typer.Option("--systemd-cgroup", help="SystemdCgroup value.")
        ] = SystemdCgroup.auto,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Print the diff of every file; write nothing.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
        hook: Annotated[
            bool,
            typer.Option("--hook", help="CRI-O/podman: write the OCI hook instead.", hidden=not with_hook),
        ] = False,
    ) -> None:
        options = RuntimeOptions(
            root=root,
            config=config,
            drop_in=drop_in,
            no_drop_in=no_drop_in,
            runtime_name=runtime_name,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            cdi=cdi,
            systemd_cgroup=systemd_cgroup.value,
            hook=hook and with_hook,
        )
        _configure(engine_name, options, dry_run, as_json)

    command.__doc__ = (
        f"Register the NVIDIA runtime with {engine_name} (backups kept; `configure revert` undoes it)."
    )
    return command


for _name in KNOWN:
    app.command(_name)(_engine_command(_name, with_hook=_name == "crio"))


@app.command("report")
def report_command(
    root: Annotated[Path, typer.Option("--root", metavar="DIR", help=ROOT_HELP)] = Path("/"),
    runtime: Annotated[
        str, typer.Option("--runtime", help="Engine to read back: containerd, docker or crio.")
    ] = "containerd",
    runtime_name: Annotated[
        Optional[str], typer.Option("--runtime-name", help="Runtime to describe (default: as configured).")
    ] = None,
    config: Annotated[
        Optional[str],
        typer.Option("--config", metavar="PATH", help="Main config to read (default: the one configure edited)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print the runtime configuration read back from the files on disk, as KEY=value lines."""
    facts = commands.report(get_engine(runtime), root, runtime_name, config)
    if as_json:
        emit_json(facts)
    else:
        emit_lines(f"{key}={value}" for key, value in facts.items())


@app.command("verify")
def verify_command(
    root: Annotated[Path, typer.Option("--root", metavar="DIR", help=ROOT_HELP)] = Path("/"),
    runtime: Annotated[
        Optional[List[str]], typer.Option("--runtime", help="Engine(s) to check (default: those configured).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Check the handler, the runtime binary, the default runtime and the CDI spec; list every problem."""
    result: Dict[str, Any] = {"ok": True, "passed": [], "problems": []}
    try:
        result["passed"] = commands.verify(root, runtime or None)
    except ProblemsFound as exc:
        result.update(ok=False, problems=exc.problems)
        if as_json:
            emit_json(result)
        else:
            emit_lines(f"PROBLEM: {problem}" for problem in exc.problems)
        raise
    if as_json:
        emit_json(result)
    else:
        emit_lines(f"ok: {line}" for line in result["passed"])


@app.command("revert")
def revert_command(
    root: Annotated[Path, typer.Option("--root", metavar="DIR", help=ROOT_HELP)] = Path("/"),
    runtime: Annotated[
        Optional[List[str]], typer.Option("--runtime", help="Engine(s) to restore (default: all changed).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Restore even files edited after gpu-airgap wrote them.")
    ] = False,
) -> None:
    """Restore every file configure changed, byte for byte, from the journaled backups."""
    restored = commands.revert_engines(root, runtime or None, force=force)
    emit_lines([*(f"{'restored' if path.exists() else 'deleted (gpu-airgap had created it)'} {path}" for path in restored), "reverted: restart the engine(s) to apply"])


# toolkit, cdi, runtimeclass (engines branch): the single line where the extra commands join.
register_extras(app)
