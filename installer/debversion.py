"""dpkg's version comparison, in process.

Preflight compares a handful of installed versions with the toolkit's dependency floors; asking
``dpkg --compare-versions`` costs a process each (two for a three-way answer), a visible share of an
install that is otherwise dpkg's own time. This is dpkg's algorithm (``lib/dpkg/version.c``:
``dpkg_version_compare`` / ``verrevcmp``), checked against the node's real dpkg in
``tests/test_debversion.py``:

- ``[epoch:]upstream[-revision]``; the epoch compares as a number, the revision is what follows the
  last hyphen (none compares like ``0``);
- upstream and revision compare in alternating runs: a non-digit run character by character, where
  ``~`` sorts before everything (even the end), then the end, then letters, then all other characters;
  then a digit run by numeric value.
"""

from __future__ import annotations

from typing import Tuple

from plumbing.errors import ToolError

_DIGITS = frozenset("0123456789")


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version ``a`` is older than, equal to or newer than ``b``.

    :raises ToolError: when either is not a version dpkg would accept (bad epoch, empty upstream).
    """
    epoch_a, upstream_a, revision_a = _split(a)
    epoch_b, upstream_b, revision_b = _split(b)
    if epoch_a != epoch_b:
        return -1 if epoch_a < epoch_b else 1
    return _sign(_verrevcmp(upstream_a, upstream_b)) or _sign(_verrevcmp(revision_a, revision_b))


def satisfied(installed: str, op: str, wanted: str) -> bool:
    """Whether ``installed op wanted`` holds, ``op`` being a Debian relation (``<<``, ``<=``, ``=``, ``>=``, ``>>``)."""
    result = compare(installed, wanted)
    return {"<<": result < 0, "<=": result <= 0, "=": result == 0, ">=": result >= 0, ">>": result > 0}[op]


def _split(version: str) -> Tuple[int, str, str]:
    text = version.strip()
    epoch = 0
    if ":" in text:
        head, text = text.split(":", 1)
        if not head or not all(c in _DIGITS for c in head):
            raise ToolError(f"the version {version!r} has an epoch that is not a number")
        epoch = int(head)
    upstream, _, revision = text.rpartition("-") if "-" in text else (text, "", "")
    if not upstream:
        raise ToolError(f"the version {version!r} has no upstream part")
    return epoch, upstream, revision


def _order(char: str) -> int:
    """dpkg's weight of one character of a non-digit run (``""`` is the end of the string)."""
    if char == "~":
        return -1
    if char == "" or char in _DIGITS:
        return 0
    if char.isascii() and char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and a[i] not in _DIGITS) or (j < len(b) and b[j] not in _DIGITS):
            weight_a = _order(a[i] if i < len(a) else "")
            weight_b = _order(b[j] if j < len(b) else "")
            if weight_a != weight_b:
                return weight_a - weight_b
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        first_diff = 0
        while i < len(a) and a[i] in _DIGITS and j < len(b) and b[j] in _DIGITS:
            first_diff = first_diff or ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i] in _DIGITS:
            return 1
        if j < len(b) and b[j] in _DIGITS:
            return -1
        if first_diff:
            return first_diff
    return 0


def _sign(value: int) -> int:
    return (value > 0) - (value < 0)
