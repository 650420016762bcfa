"""How commands show results: human lines on a terminal, one JSON object with ``--json``."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Dict, Union

_INTEGER = re.compile(r"^-?[0-9]+$")
#: whether this process already printed its JSON object (an error after it must not print a second one)
_state = {"emitted": False}


def emit_json(data: Mapping[str, Any]) -> None:
    """Print ``data`` as one indented JSON object on stdout."""
    print(json.dumps(data, indent=2, sort_keys=False, default=str))
    _state["emitted"] = True


def json_emitted() -> bool:
    """True once :func:`emit_json` printed this run's object."""
    return _state["emitted"]


def reset() -> None:
    """Forget an earlier run's object (the command line runs once per process, tests run it many times)."""
    _state["emitted"] = False


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
