"""k3s/RKE2 ``config(-v3).toml.tmpl`` files that extend the base template and never redeclare its tables.

k3s renders its containerd config from a Go template on every start; an admin's
``config.toml.tmpl`` (``config-v3.toml.tmpl`` for config version 3) replaces it, and
``{{ template "base" . }}`` pulls the generated content in. A table the base already renders
(the CRI plugin table, ``runc``, an auto-detected ``nvidia`` runtime, ...) must not be declared
again after it: containerd refuses the rendered file ("table ... already exists", see the
``_after-restart-with-tmpl`` fixtures). So we only ever append tables the base does not render,
and :func:`redeclared` finds the ones an existing template redeclares.

Tables are compared by their key path with quoting removed (``runtimes.'nvidia'`` is
``runtimes.nvidia``), from the header lines of the files: a Go template is not TOML.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Dict, Iterable, List, Optional, Tuple

BASE = '{{ template "base" . }}'
BEGIN = (
    "# BEGIN gpu-airgap: the NVIDIA runtime (configure containerd; `gpu-airgap configure revert` removes it)"
)
END = "# END gpu-airgap"
_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_SEGMENT = re.compile(r"""\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*(?:\.|$)""")


def table_key(header: str) -> Tuple[str, ...]:
    """``plugins."io.containerd.grpc.v1.cri".containerd`` -> its key path, quoting removed."""
    parts: List[str] = []
    pos = 0
    while pos < len(header):
        match = _SEGMENT.match(header, pos)
        if match is None or match.end() == pos:
            return (header.strip(),)
        parts.append(next(g for g in match.groups() if g is not None))
        pos = match.end()
    return tuple(parts)


def tables(text: str) -> Counter[Tuple[str, ...]]:
    """How often each table header occurs in ``text`` (a TOML file or a template)."""
    found: Counter[Tuple[str, ...]] = Counter()
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            found[table_key(match.group(1))] += 1
    return found


def tail(template: str) -> str:
    """What a template adds after ``{{ template "base" . }}`` (the whole text when it does not use the base)."""
    _, found, rest = template.partition(BASE)
    return rest if found else template


def base_tables(
    generated: str, template: str = "", extra: Iterable[Tuple[str, ...]] = ()
) -> Counter[Tuple[str, ...]]:
    """The tables k3s's base template renders, read from the config it generated, plus ``extra``.

    When the generated file was rendered with ``template`` (its added tables appear in it), those
    are subtracted again, so what is left is the base's own. ``extra`` are the tables the base
    will render at the next start whatever the file says now (the runtimes the agent detects).
    """
    counts = tables(generated)
    added = tables(tail(template)) if template else Counter()
    if added and all(counts[key] >= n for key, n in added.items()):
        counts.subtract(added)
    counts.update(extra)
    return +counts


def redeclared(template: str, base: Iterable[Tuple[str, ...]]) -> List[str]:
    """The tables ``template`` declares after the base that the base already renders (containerd refuses those)."""
    if BASE not in template:
        return []
    known = set(base)
    return [".".join(key) for key in tables(tail(template)) if key in known]


def runtime_block(plugin: str, name: str, binary: str, systemd: Optional[bool], quote: str) -> str:
    """Our tables: one runtime entry under ``plugin``, between the BEGIN and END marker comments."""
    head = f"[plugins.{quote}{plugin}{quote}.containerd.runtimes.{quote}{name}{quote}]"
    lines = [
        BEGIN,
        head,
        '  runtime_type = "io.containerd.runc.v2"',
        head[:-1] + ".options]",
        f'  BinaryName = "{binary}"',
    ]
    if systemd is not None:
        lines.append(f"  SystemdCgroup = {str(systemd).lower()}")
    lines.append(END)
    return "\n".join(lines) + "\n"


def with_block(existing: str, block: str) -> str:
    """``existing`` (a template, or "" for a new one) with our block in place of any earlier one."""
    text = existing
    start = text.find(BEGIN)
    if start >= 0:
        end = text.find(END, start)
        stop = text.find("\n", end) + 1 if end >= 0 else len(text)
        text = text[:start] + text[stop or len(text) :]
    if not text:
        text = BASE + "\n"
    if not text.endswith("\n"):
        text += "\n"
    return text + "\n" + block if not text.endswith("\n\n") else text + block


def render_with_base(template: str, base: str) -> str:
    """What k3s writes for ``template``: the base text in place of ``{{ template "base" . }}`` (for checks)."""
    return template.replace(BASE, base.rstrip("\n"), 1)


def parsed_keys(data: Dict[str, object], prefix: Tuple[str, ...] = ()) -> List[Tuple[str, ...]]:
    """Every table path in parsed TOML data (to compare with :func:`tables`)."""
    keys: List[Tuple[str, ...]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            keys.append((*prefix, key))
            keys.extend(parsed_keys(value, (*prefix, key)))
    return keys
