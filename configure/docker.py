"""Docker: register the NVIDIA runtime in ``/etc/docker/daemon.json``.

What we change, and only that: ``runtimes.<name> = {"path": ..., "args": []}``; with ``--cdi``
``features.cdi = true`` merged into the existing ``features`` (NVIDIA's nvidia-ctk replaced the
whole object and lost ``containerd-snapshotter``/``buildkit``); ``default-runtime`` only with
``--set-as-default``. Every other key, and the order of every key, is kept: JSON objects load into
insertion-ordered dicts and are written back in the same order.

Formatting: the output keeps the input's indent unit (the leading whitespace of its first
indented line; 2 spaces for a new file) and its trailing newline. Lists of plain values are kept
on one line (``"exec-opts": ["native.cgroupdriver=systemd"]``) unless the input wrote a list over
several lines, in which case every list is expanded. An unchanged daemon.json (same data) keeps its
exact bytes, so a second run writes nothing whatever the file's formatting.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from configure.changes import FileChange, read_optional
from configure.engine import ConfigPlan, Engine, RuntimeOptions
from plumbing.errors import ConfigFormatError, UsageError
from plumbing.fsutil import rooted
from plumbing.textio import decode_utf8

DAEMON_JSON = "/etc/docker/daemon.json"
#: dockerd's built-in default runtime when ``default-runtime`` is absent
DOCKER_DEFAULT_RUNTIME = "runc"


@dataclass(frozen=True)
class JsonStyle:
    """How a daemon.json is laid out, so we can write it back the same way."""

    indent: str = "  "
    inline_scalar_lists: bool = True
    final_newline: bool = True


def detect_style(text: str) -> JsonStyle:
    """Read the indent unit, list layout and trailing newline from ``text``."""
    indent = "  "
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and stripped != line:
            indent = line[: len(line) - len(stripped)]
            break
    # A line ending in "[" opens a list written over several lines.
    expanded = re.search(r"\[[ \t]*\r?\n[ \t]*[^\s\]]", text) is not None
    return JsonStyle(
        indent=indent, inline_scalar_lists=not expanded, final_newline=text.endswith("\n") or not text
    )


def parse_daemon_json(text: str, path: object = DAEMON_JSON) -> Dict[str, Any]:
    """Parse daemon.json text into an insertion-ordered dict.

    :raises ConfigFormatError: for an empty file, invalid JSON or a top level that is not an object.
    """
    if not text.strip():
        # dockerd refuses an empty daemon.json too (moby/moby#41268); we do not guess what was meant.
        raise ConfigFormatError(
            path, "the file is empty, which dockerd rejects; write {} into it or remove it"
        )
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        # json keeps the last one silently; writing back would drop the other without a word.
        raise ConfigFormatError(
            path, f'the key "{exc}" appears twice in one object; keep one of them'
        ) from exc
    except ValueError as exc:
        raise ConfigFormatError(path, f"is not valid JSON ({exc}); fix or remove it first") from exc
    except RecursionError as exc:  # json recurses per level; the CLI's handler would not name the file
        raise ConfigFormatError(path, "nests its JSON too deeply to be read; fix or remove it first") from exc
    if not isinstance(data, dict):
        raise ConfigFormatError(path, "the top level must be a JSON object")
    return data


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    data: Dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def render_daemon_json(data: Dict[str, Any], style: JsonStyle = JsonStyle()) -> str:
    """Render ``data`` in ``style`` (keys in their current order)."""
    text = _render(data, style, 0)
    return text + "\n" if style.final_newline else text


def _render(value: Any, style: JsonStyle, level: int) -> str:
    pad = style.indent * (level + 1)
    end = style.indent * level
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [
            f"{pad}{json.dumps(k, ensure_ascii=False)}: {_render(v, style, level + 1)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if style.inline_scalar_lists and not any(isinstance(v, (dict, list)) for v in value):
            return "[" + ", ".join(json.dumps(v, ensure_ascii=False) for v in value) + "]"
        return "[\n" + ",\n".join(pad + _render(v, style, level + 1) for v in value) + "\n" + end + "]"
    return json.dumps(value, ensure_ascii=False)


def _object(data: Dict[str, Any], key: str, path: object) -> Dict[str, Any]:
    """The object at ``data[key]``, created when absent."""
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise ConfigFormatError(path, f'"{key}" must be a JSON object, not {type(value).__name__}')
    return value


def add_runtime(
    data: Dict[str, Any], name: str, runtime_path: str, path: object = DAEMON_JSON
) -> Optional[str]:
    """Set ``runtimes.<name>.path`` (keeping other keys of that entry); return the path it replaced."""
    runtimes = _object(data, "runtimes", path)
    entry = runtimes.setdefault(name, {})
    if not isinstance(entry, dict):
        raise ConfigFormatError(path, f'"runtimes.{name}" must be a JSON object')
    previous = entry.get("path")
    entry["path"] = runtime_path
    entry.setdefault("args", [])
    return previous if isinstance(previous, str) and previous != runtime_path else None


def enable_cdi(data: Dict[str, Any], path: object = DAEMON_JSON) -> None:
    """Merge ``"cdi": true`` into ``features``, keeping every other feature flag."""
    _object(data, "features", path)["cdi"] = True


def default_runtime(data: Dict[str, Any]) -> str:
    """The runtime dockerd uses by default for this config."""
    value = data.get("default-runtime")
    return value if isinstance(value, str) and value else DOCKER_DEFAULT_RUNTIME


class DockerEngine:
    """The Docker engine: one file, ``daemon.json``, edited in place (dockerd has no drop-ins)."""

    name = "docker"

    def plan(self, options: RuntimeOptions) -> ConfigPlan:
        """Load daemon.json under the root, add the runtime in memory and render; never write."""
        if options.drop_in:
            raise UsageError(
                "dockerd has no drop-in directory; daemon.json is edited in place, so omit --drop-in"
            )
        path = rooted(options.root, options.config or DAEMON_JSON)
        old = read_optional(path)
        plan = ConfigPlan(engine=self.name)
        if old is None:
            data: Dict[str, Any] = {}
            style = JsonStyle()
        else:
            text = decode_utf8(old, path)
            data = parse_daemon_json(text, path)
            style = detect_style(text)
        before = copy.deepcopy(data)
        replaced = add_runtime(data, options.runtime_name, options.runtime_path, path)
        if replaced is not None:
            plan.warnings.append(
                f'runtime "{options.runtime_name}" pointed to {replaced}; it now points to {options.runtime_path}'
            )
        if options.cdi:
            enable_cdi(data, path)
        previous_default = default_runtime(data)  # dockerd's effective default, runc when unset
        if options.set_as_default:
            data["default-runtime"] = options.runtime_name
        if options.hook:
            plan.warnings.append("--hook applies to CRI-O and podman only; ignored for docker")
        # Same data -> same bytes: a hand-formatted daemon.json is never rewritten for nothing.
        new = old if (old is not None and data == before) else render_daemon_json(data, style).encode()
        plan.changes.append(FileChange(path, old, new, mode=0o644))
        plan.notes.update(
            {
                "config": options.config or DAEMON_JSON,
                "runtime_name": options.runtime_name,
                "runtime_path": options.runtime_path,
                "set_as_default": options.set_as_default,
                "previous_default": previous_default,
            }
        )
        plan.facts.update(_facts(data, options.runtime_name))
        return plan

    def report(self, root: Path, runtime_name: str, config: Optional[str] = None) -> Dict[str, str]:
        """Read daemon.json (or ``config``) under ``root`` back: RUNTIME, RUNTIME_PATH, DEFAULT, CDI."""
        path = rooted(root, config or DAEMON_JSON)
        raw = read_optional(path)
        data = {} if raw is None else parse_daemon_json(decode_utf8(raw, path), path)
        return _facts(data, runtime_name)


def _facts(data: Dict[str, Any], runtime_name: str) -> Dict[str, str]:
    facts: Dict[str, str] = {}
    runtimes = data.get("runtimes")
    entry = runtimes.get(runtime_name) if isinstance(runtimes, dict) else None
    if isinstance(entry, dict):
        facts["RUNTIME"] = runtime_name
        facts["RUNTIME_PATH"] = str(entry.get("path", ""))
    facts["DEFAULT"] = default_runtime(data)
    features = data.get("features")
    facts["CDI"] = "true" if isinstance(features, dict) and features.get("cdi") is True else "false"
    return facts


def registered_runtimes(data: Dict[str, Any]) -> List[str]:
    """Names of the runtimes daemon.json registers (besides dockerd's built-in runc)."""
    runtimes = data.get("runtimes")
    return list(runtimes) if isinstance(runtimes, dict) else []


_: Engine = DockerEngine()
