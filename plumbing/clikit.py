"""What every gpu-airgap command line shares: the group class, option checks and deprecated spellings.

:class:`Group` is the click group of the root and of every sub-group (``mirror``, ``bundle``,
``configure``, ``fleet``). It accepts ``-h`` beside ``--help`` (child contexts inherit the help
option names), lifts ``--debug`` to the root wherever it is written, and refuses a single-value
option given twice instead of letting the last one silently win.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import click
from click.core import ParameterSource
from typer.core import TyperGroup

from plumbing import output, spellings
from plumbing.errors import ExitCode, ToolError, UsageError
from plumbing.output import warn
from plumbing.output_target import output_is_stdout

HELP_OPTIONS = ["-h", "--help"]
#: flags of the root that may be written after the subcommand too
GLOBAL_FLAGS = ("--debug",)


def hoist_global_flags(args: Sequence[str]) -> List[str]:
    """``args`` with every :data:`GLOBAL_FLAGS` token before ``--`` moved to the front, so the root parses it."""
    args = list(args)
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in GLOBAL_FLAGS]
    rest = [a for a in args[:end] if a not in GLOBAL_FLAGS]
    return flags + rest + args[end:]


def _option_values(command: click.Command, args: Sequence[str]) -> Iterator[Tuple[click.Option, str]]:
    """Each value-taking option of ``command`` on the command line ``args`` (before ``--``) with its value."""
    takes_value: Dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag and not param.count:
            for name in (*param.opts, *param.secondary_opts):
                takes_value[name] = param
    i = 0
    while i < len(args) and args[i] != "--":
        token = args[i]
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        option = takes_value.get(name)
        if option is not None and (eq or i + 1 < len(args)):
            if not eq:
                value = args[i + 1]
                i += 1
            yield option, value
        i += 1


def repeated_option(command: click.Command, args: Sequence[str]) -> Optional[Tuple[str, List[str]]]:
    """The first single-value option of ``command`` that ``args`` gives more than once, with its values."""
    seen: Dict[str, List[str]] = {}
    for option, value in _option_values(command, args):
        if option.multiple:
            continue
        values = seen.setdefault(option.name or option.opts[0], [])
        values.append(value)
        if len(values) > 1:
            return option.opts[0], values
    return None


def empty_option(command: click.Command, args: Sequence[str]) -> Optional[UsageError]:
    """The refusal of the first option of ``command`` that ``args`` gives an empty value, or None.

    An empty value is never meant (an unset shell variable, ``--root "$ROOT"``), and some would be
    read dangerously: an empty ``--root`` is the current directory, from ``/`` the live system; an
    empty ``--format`` or ``--arch`` list would sync nothing and succeed.
    """
    for option, value in _option_values(command, args):
        if value.strip():
            continue
        name = option.opts[0]
        if name == "--root":
            return UsageError(
                "--root is empty, which would mean the current directory; give the directory (/ for this system)"
            )
        return UsageError(f"{name} is empty; give it a value or leave it out")
    return None


class Group(TyperGroup):
    """The click group of every gpu-airgap group (see the module docstring)."""

    def __init__(self, **attrs: Any) -> None:
        settings = dict(attrs.pop("context_settings", None) or {})
        settings.setdefault("help_option_names", HELP_OPTIONS)
        super().__init__(context_settings=settings, **attrs)

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        """The root (the group with ``--debug``) takes its global flags from anywhere on the line."""
        if any(isinstance(p, click.Option) and "--debug" in p.opts for p in self.params):
            args = hoist_global_flags(args)
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: List[str]
    ) -> Tuple[Optional[str], Optional[click.Command], List[str]]:
        """Find the subcommand, in today's spellings; a leaf command given the same single-value option twice is
        a usage error."""
        foreign = spellings.foreign_command(args) if ctx.parent is None and args[:1] == ["runtime"] else None
        if foreign is not None:
            raise UsageError(foreign)
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, click.Group):
            rest, warnings = spellings.modernize(command, rest)
            for message in warnings:
                warn(message)
            repeated = repeated_option(command, rest)
            if repeated is not None:
                option, values = repeated
                raise UsageError(f"{option} was given more than once ({', '.join(values)}); give it once")
            empty = empty_option(command, rest)
            if empty is not None:
                raise empty
        return name, command, rest


def given(ctx: click.Context, name: str) -> bool:
    """Whether the parameter ``name`` (its Python name) was written on the command line."""
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def option_name(ctx: click.Context, name: str) -> str:
    """The spelling of the parameter ``name`` users write (``fmt`` -> ``--format``)."""
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option):
            return param.opts[0]
    return name


def refuse_with(ctx: click.Context, name: str, others: Sequence[str], why: str) -> None:
    """:raises UsageError: when the parameter ``name`` and any of ``others`` were both given."""
    if not given(ctx, name):
        return
    clashing = [option_name(ctx, other) for other in others if given(ctx, other)]
    if clashing:
        raise UsageError(f"{option_name(ctx, name)} cannot be combined with {', '.join(clashing)}: {why}")


def unknown_option(exc: click.NoSuchOption, args: Sequence[str]) -> Exception:
    """``exc`` as one sentence naming the option meant, when the unknown one is an old or foreign spelling."""
    path = " ".join(exc.ctx.command_path.split()[1:]) if exc.ctx is not None else ""
    sentence = spellings.hint(path, exc.option_name, args)
    return exc if sentence is None else UsageError(sentence)


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json`` (before any ``--``)."""
    end = list(args).index("--") if "--" in args else len(args)
    return "--json" in args[:end]


def error_fields(message: str, exit_code: int, problems: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The ``error`` of a failed command's ``--json`` object: its code name, exit code and sentence (and problems)."""
    try:
        name = ExitCode(exit_code).name.lower()
    except ValueError:
        name = "error"
    error: Dict[str, Any] = {"code": name, "exit_code": exit_code, "message": message}
    if problems:
        error["problems"] = list(problems)
    return error


def refuse_json_to_stdout(json_output: bool, written: Path) -> None:
    """:raises UsageError: ``--json`` while ``--output`` is stdout: both would share one stream."""
    if json_output and (str(written) == "-" or output_is_stdout(written)):
        raise UsageError(f"--json and --output {written} both write to stdout; write the output elsewhere")


def emit_report(lines: Sequence[str], written: Path) -> None:
    """Print a command's report lines: on stderr when ``--output`` is stdout, so they do not corrupt it."""
    if output_is_stdout(written):
        for line in lines:
            output.note(line)
        return
    output.emit_lines(lines)


def error_for(exc: BaseException) -> Optional[ToolError]:
    """The one-sentence error for a failure any command can meet wherever it reads input, or None.

    These are caught once, where errors are printed, instead of in every command: a path longer
    than the kernel takes (``ENAMETOOLONG``, exit 2), input nested deeper than Python's parsers
    recurse (a hostile JSON document), and a command-line value that is not UTF-8 (Python keeps
    its bytes as lone surrogates, which no text format can encode; exit 2).
    """
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        name = os.fsdecode(exc.filename) if exc.filename is not None else ""
        shown = name if len(name) <= 60 else f"{name[:40]}…{name[-15:]}"
        return UsageError(
            f"the path {shown!r} ({len(name)} characters) is too long for this system; give a shorter one"
        )
    if isinstance(exc, RecursionError):
        return ToolError("the input is nested too deeply to be read (corrupt or hostile); refusing it")
    if isinstance(exc, UnicodeEncodeError) and "surrogate" in str(exc):
        return UsageError("a path or value is not valid UTF-8; give paths and values in UTF-8")
    return None


def check_utf8_arguments(args: Sequence[str]) -> None:
    """Refuse a command-line value that is not UTF-8, naming its option, before any command runs.

    Python keeps such bytes as lone surrogates; they would fail deep inside whatever writes the
    value (a TOML or JSON file, a URL, a message), so they are refused here, once, for every command.

    :raises UsageError: naming the option (or the position) and the value with its bytes escaped.
    """
    for index, arg in enumerate(args):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            name, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
            if not eq:
                name = args[index - 1] if index and args[index - 1].startswith("-") else "an argument"
            shown = os.fsencode(value if eq else arg).decode("ascii", "backslashreplace")
            raise UsageError(f"{name} '{shown}' is not valid UTF-8; give paths and values in UTF-8") from None
