"""How commands show results: human lines on a terminal, one JSON object with ``--json``."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Dict, Optional, Union

_INTEGER = re.compile(r"^-?[0-9]+$")
#: ``emitted``: this run printed (or holds) its JSON object; ``holding``: the command line holds the object
#: until the exit code is known (:func:`finish_json`); ``held``: that object
_state: Dict[str, Any] = {"emitted": False, "holding": False, "held": None}


def _print(data: Mapping[str, Any]) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def emit_json(data: Mapping[str, Any]) -> None:
    """Print ``data`` as the run's one JSON object on stdout (the command line adds the envelope first)."""
    _state["emitted"] = True
    if _state["holding"]:
        _state["held"] = dict(data)
    else:
        _print(data)


def json_emitted() -> bool:
    """True once :func:`emit_json` printed (or handed over) this run's object."""
    return bool(_state["emitted"])


def reset(*, hold: bool = False) -> None:
    """Forget an earlier run's object (the command line runs once per process, tests run it many times).

    :param hold: keep the object :func:`emit_json` is given until :func:`finish_json` knows the exit code.
    """
    _state.update(emitted=False, holding=hold, held=None)


def envelope(
    data: Optional[Mapping[str, Any]], exit_code: int, error: Optional[Mapping[str, Any]]
) -> Dict[str, Any]:
    """Every ``--json`` object's shape: ``ok`` first (true only for exit 0), the command's fields, then ``error``.

    A command whose own fields say ``"ok": false`` (a check that found problems) stays not ok.
    """
    fields = dict(data or {})
    ok = fields.pop("ok", True) is not False and exit_code == 0
    return {"ok": ok, **fields, **({"error": dict(error)} if error is not None else {})}


def finish_json(exit_code: int, error: Optional[Mapping[str, Any]]) -> None:
    """Print the held object (if any, or the ``error`` alone) in its envelope; nothing when there is neither."""
    held = _state["held"]
    _state.update(holding=False, held=None)
    if held is None and error is None:
        return
    _print(envelope(held, exit_code, error))


def typed(value: str) -> Union[str, int, bool]:
    """A fact's text as its JSON type: ``true``/``false`` as booleans, whole numbers as numbers."""
    if value in ("true", "false"):
        return value == "true"
    if _INTEGER.match(value) and (value == "0" or not value.lstrip("-").startswith("0")):
        return int(value)
    return value


def json_facts(facts: Mapping[str, str]) -> Dict[str, Any]:
    """``KEY=value`` facts (``SYSTEMD_CGROUP=true``) as JSON fields: snake_case keys, typed values."""
    return {key.lower(): typed(value) for key, value in facts.items()}


def emit_lines(lines: Iterable[str]) -> None:
    """Print human-readable lines on stdout."""
    for line in lines:
        print(line)


def note(message: str) -> None:
    """Print a line for the user on stderr (what was written where), keeping stdout for the result."""
    print(message, file=sys.stderr)


def warn(message: str) -> None:
    """Print a one-line warning on stderr."""
    print(f"warning: {message}", file=sys.stderr)
