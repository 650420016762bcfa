"""How commands show results: human lines on a terminal, one JSON object with ``--json``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any


def emit_json(data: Mapping[str, Any]) -> None:
    """Print ``data`` as one indented JSON object on stdout."""
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def emit_lines(lines: Iterable[str]) -> None:
    """Print human-readable lines on stdout."""
    for line in lines:
        print(line)


def warn(message: str) -> None:
    """Print a one-line warning on stderr."""
    print(f"warning: {message}", file=sys.stderr)
