"""The node-side command line: ``install``, ``uninstall``, ``status``, ``bundle verify|inspect``, ``configure``.

This is also the zipapp's entry point. :func:`run` is the only place that turns a
:class:`~plumbing.errors.ToolError` into a message on stderr and an exit code; tracebacks are
shown only with ``--debug``. ``mirror.cli`` adds the connected-side groups to the same app.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import click
import typer

from plumbing import output
from plumbing.clikit import Group, check_utf8_arguments, error_fields, error_for, unknown_option, wants_json
from plumbing.errors import ExitCode, ToolError
from plumbing.version import VERSION

PROG = "gpu-airgap"
_debug = False

#: Groups whose module is imported only when the group runs: name -> (module, attribute, help).
#: ``configure.cli`` pulls in tomlkit and PyYAML, which the zipapp would otherwise compile for
#: every ``install`` and ``--help``. The help is repeated here so the root help needs no import;
#: a test checks it matches the group's own.
LAZY_GROUPS: Dict[str, Tuple[str, str, str]] = {
    "configure": (
        "configure.cli",
        "app",
        "Register the NVIDIA runtime with containerd, Docker or CRI-O; give Podman and LXC the GPUs; write CDI specs and RuntimeClasses.",
    ),
}


class _LazyGroup(click.Group):
    """Stands in for a typer group in the root's command list until the group is invoked."""

    def __init__(self, name: str, module: str, attribute: str, help_text: str) -> None:
        super().__init__(name=name, help=help_text)
        self._module = module
        self._attribute = attribute

    def load(self) -> click.Group:
        """Import the group's module and build the real click group."""
        group: typer.Typer = getattr(importlib.import_module(self._module), self._attribute)
        return typer.main.get_group(group)

    def make_context(
        self, info_name: Optional[str], args: list[str], parent: Optional[click.Context] = None, **extra: Any
    ) -> click.Context:
        """Invoking (or ``--help`` on) the group hands over to the real one."""
        return self.load().make_context(info_name, args, parent=parent, **extra)


class _RootGroup(Group):
    """The root group: typer's, plus the :data:`LAZY_GROUPS` (and ``more_lazy``) stand-ins listed last."""

    more_lazy: ClassVar[Mapping[str, Tuple[str, str, str]]] = {}  #: set per app by :func:`make_app`

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, (module, attribute, help_text) in {**self.more_lazy, **LAZY_GROUPS}.items():
            self.add_command(_LazyGroup(name, module, attribute, help_text))


def _version_callback(value: bool) -> None:
    if value:
        print(f"{PROG} {VERSION}")
        raise typer.Exit()


def _root_callback(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logging."),
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Get the NVIDIA Container Toolkit onto air-gapped GPU nodes and wire it into their container engines."""
    global _debug
    _debug = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    # python-gnupg logs every non-zero gpg exit as a warning; we turn those into one ToolError sentence.
    logging.getLogger("gnupg").setLevel(logging.DEBUG if debug else logging.CRITICAL)


#: the node tool's ``bundle`` help names only the commands it has; ``mirror.cli`` adds ``build`` and says so
NODE_BUNDLE_HELP = "Inspect, verify, push and pull signed offline bundles."


def make_bundle_app(help_text: str = NODE_BUNDLE_HELP) -> typer.Typer:
    """The ``bundle`` group with the node-side commands; ``mirror.cli`` adds ``build``."""
    from installer.cli.bundle import add_bundle_commands
    from installer.cli.oci import add_oci_commands

    bundle_app = typer.Typer(cls=Group, help=help_text, no_args_is_help=True)
    add_bundle_commands(bundle_app)
    add_oci_commands(bundle_app)
    return bundle_app


def make_app(
    *,
    bundle_app: Optional[typer.Typer] = None,
    lazy_groups: Optional[Mapping[str, Tuple[str, str, str]]] = None,
) -> typer.Typer:
    """Build the root app; ``lazy_groups`` (like :data:`LAZY_GROUPS`) adds the connected-side groups."""
    root = (
        type("_RootGroup", (_RootGroup,), {"more_lazy": dict(lazy_groups or {})})
        if lazy_groups
        else _RootGroup
    )
    app = typer.Typer(
        name=PROG,
        cls=root,
        callback=_root_callback,
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        add_completion=False,
    )
    app.add_typer(bundle_app or make_bundle_app(), name="bundle")
    _add_node_commands(app)
    return app


def _add_node_commands(app: typer.Typer) -> None:
    from installer.cli.node import add_node_commands

    add_node_commands(app)


def run(app: typer.Typer, argv: Optional[Sequence[str]] = None) -> int:
    """Run ``app`` on ``argv`` and return the exit code; the one place errors (and ``--json`` objects) are printed."""
    args = list(sys.argv[1:] if argv is None else argv)
    output.reset(hold=True)
    code, error = _run(typer.main.get_command(app), args)
    output.finish_json(code, error if wants_json(args) else None)
    return code


def _run(command: click.Command, args: List[str]) -> Tuple[int, Optional[Dict[str, Any]]]:
    """The exit code of ``command`` on ``args`` and, when it failed with a sentence, its ``--json`` error."""
    try:
        try:
            check_utf8_arguments(args)
            result = command.main(args=args, prog_name=PROG, standalone_mode=False)
        except click.NoSuchOption as unknown:
            raise unknown_option(unknown, args) from None
        except (OSError, RecursionError, UnicodeEncodeError) as raw:
            translated = error_for(raw)
            if translated is None:
                raise
            raise translated from raw
    except ToolError as exc:
        if _debug or "--debug" in args:
            traceback.print_exc()
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(exc.exit_code), error_fields(str(exc), int(exc.exit_code), getattr(exc, "problems", None))
    except click.exceptions.Exit as exc:
        return int(exc.exit_code), None
    except click.ClickException as exc:
        exc.show()
        return int(exc.exit_code), error_fields(exc.format_message(), int(exc.exit_code))
    except click.exceptions.Abort:
        print(f"{PROG}: aborted", file=sys.stderr)
        return int(ExitCode.ERROR), error_fields("aborted", int(ExitCode.ERROR))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130, None
    return (int(result) if isinstance(result, int) else int(ExitCode.OK)), None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the node-side zipapp."""
    return run(make_app(), argv)


if __name__ == "__main__":
    sys.exit(main())
