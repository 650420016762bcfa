"""Line-oriented config edits that own exactly the lines they add (LXC's ``key = value`` container configs).

LXC reads its config line by line, and keys such as ``lxc.environment`` and ``lxc.hook.mount``
repeat: there is no table to merge into. So we only ever *append* whole lines, and record them
(:func:`owned_notes`) in the journal entry of the write. ``revert`` then takes out exactly those
lines (:func:`remove_lines`), even when someone edited the file since: their edits stay, which a
byte-for-byte restore of the backup could not promise. Everything here is pure: text in, text out.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

#: the journal note listing the lines a write added (see :func:`owned_notes`)
OWNED = "owned_lines"


def config_lines(text: str) -> List[Tuple[str, str]]:
    """``(key, value)`` of every ``key = value`` line, in order; blanks and ``#`` comments skipped."""
    pairs: List[Tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        pairs.append((key.strip(), value.strip()))
    return pairs


def values(text: str, key: str) -> List[str]:
    """Every value ``key`` has in ``text``, in order."""
    return [value for name, value in config_lines(text) if name == key]


def append_lines(text: str, lines: Sequence[str]) -> Tuple[str, List[str]]:
    """``text`` with ``lines`` appended (after a newline if it lacks one); returns ``(new text, lines added)``.

    A line already present (the same after stripping blanks) is not added again.
    """
    present = {raw.strip() for raw in text.splitlines()}
    added = [line for line in lines if line.strip() not in present]
    if not added:
        return text, []
    prefix = text if not text or text.endswith("\n") else text + "\n"
    return prefix + "".join(line + "\n" for line in added), added


def remove_lines(text: str, lines: Sequence[str]) -> str:
    """``text`` without one occurrence of each of ``lines`` (the last one: appended lines come last).

    A line that is no longer there is skipped; every other line, edited or not, stays as it is.
    """
    kept = text.splitlines(keepends=True)
    for line in lines:
        for index in range(len(kept) - 1, -1, -1):
            if kept[index].strip() == line.strip():
                del kept[index]
                break
    return "".join(kept)


def owned_notes(added: Sequence[str]) -> Dict[str, Any]:
    """The journal notes that say which lines a write owns."""
    return {OWNED: list(added)}


def owned_lines(notes: Sequence[Dict[str, Any]]) -> Optional[List[str]]:
    """The lines the writes with ``notes`` added, in order; None when a write was not a line edit."""
    lines: List[str] = []
    for note in notes:
        owned = note.get(OWNED)
        if not isinstance(owned, list):
            return None
        lines.extend(str(line) for line in owned)
    return lines
