"""Version ordering for both package worlds, exactly as dpkg and rpm order them.

* deb: python-debian's ``debian.debian_support.version_compare`` (dpkg's algorithm: epoch,
  upstream, revision; ``~`` sorts before everything, even the end of the string).
* rpm: :func:`rpmvercmp`, a line-for-line port of rpm's ``rpmvercmp()`` (rpmio/rpmvercmp.c,
  rpm >= 4.15, with ``~`` and ``^``), and :func:`rpm_evr_compare` for ``[epoch:]version-release``.
  The one pure-Python package on PyPI (rpm-vercmp, last released 2018) predates caret support,
  so we keep our own and test it against rpm's own table (tests/test_versions.py).

:func:`satisfies` applies a relation operator with each tool's own rules for a bound that omits
part of the version: dpkg compares full versions (``1.17.8-1 >= 1.17.8`` holds because a missing
revision sorts lowest), rpm ignores the release when the bound has none (``1.17.8-1 = 1.17.8``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from debian.debian_support import version_compare

from mirror.model import PackageFormat

OPERATORS: Final = ("<<", "<=", "=", ">=", ">>")


def deb_compare(a: str, b: str) -> int:
    """Compare two Debian versions; negative, zero or positive like ``dpkg --compare-versions``."""
    result = version_compare(a, b)
    return (result > 0) - (result < 0)


def rpmvercmp(a: str, b: str) -> int:
    """Compare two rpm version (or release) strings exactly like rpm's ``rpmvercmp``: -1, 0 or 1."""
    if a == b:
        return 0
    i, j, la, lb = 0, 0, len(a), len(b)
    while i < la or j < lb:
        while i < la and not _isalnum(a[i]) and a[i] not in "~^":
            i += 1
        while j < lb and not _isalnum(b[j]) and b[j] not in "~^":
            j += 1
        ca = a[i] if i < la else ""
        cb = b[j] if j < lb else ""
        # Tilde sorts before everything else, even the end of the string.
        if ca == "~" or cb == "~":
            if ca != "~":
                return 1
            if cb != "~":
                return -1
            i, j = i + 1, j + 1
            continue
        # Caret sorts after the end of the string but before anything else.
        if ca == "^" or cb == "^":
            if not ca:
                return -1
            if not cb:
                return 1
            if ca != "^":
                return 1
            if cb != "^":
                return -1
            i, j = i + 1, j + 1
            continue
        if not (ca and cb):
            break
        isnum = ca.isdigit() and ca.isascii()
        test: Callable[[str], bool] = _isdigit if isnum else _isalpha
        si = i
        while i < la and test(a[i]):
            i += 1
        sj = j
        while j < lb and test(b[j]):
            j += 1
        seg_a, seg_b = a[si:i], b[sj:j]
        if not seg_a:
            return -1  # rpm calls this case "arbitrary"; it cannot happen after the skips above
        if not seg_b:
            return 1 if isnum else -1
        if isnum:
            seg_a, seg_b = seg_a.lstrip("0"), seg_b.lstrip("0")
            if len(seg_a) != len(seg_b):
                return 1 if len(seg_a) > len(seg_b) else -1
        if seg_a != seg_b:
            return 1 if seg_a > seg_b else -1
    if i >= la and j >= lb:
        return 0
    return -1 if i >= la else 1


def split_evr(evr: str) -> tuple[int, str, str | None]:
    """Split ``[epoch:]version[-release]`` into (epoch, version, release or None)."""
    epoch = 0
    if ":" in evr:
        head, evr = evr.split(":", 1)
        epoch = int(head) if head.isdigit() else 0
    version, sep, release = evr.rpartition("-")
    if not sep:
        return epoch, release, None
    return epoch, version, release


def rpm_evr_compare(a: str, b: str, *, ignore_missing_release: bool = False) -> int:
    """Compare rpm ``[epoch:]version-release`` strings like ``rpmvercmp`` on each part in turn.

    :param ignore_missing_release: skip the release when either side has none (rpm's rule for
        dependency ranges such as ``Requires: foo >= 1.17.8``).
    """
    ea, va, ra = split_evr(a)
    eb, vb, rb = split_evr(b)
    if ea != eb:
        return 1 if ea > eb else -1
    result = rpmvercmp(va, vb)
    if result or (ignore_missing_release and (ra is None or rb is None)):
        return result
    return rpmvercmp(ra or "", rb or "")


def compare(a: str, b: str, fmt: PackageFormat) -> int:
    """Compare two full versions of packages in format ``fmt``: -1, 0 or 1."""
    return deb_compare(a, b) if fmt is PackageFormat.DEB else rpm_evr_compare(a, b)


def sort_key(fmt: PackageFormat) -> Callable[[str], Any]:
    """A ``key=`` function that sorts version strings of ``fmt`` oldest first."""
    return functools.cmp_to_key(lambda x, y: compare(x, y, fmt))


def satisfies(version: str, op: str | None, bound: str | None, fmt: PackageFormat) -> bool:
    """Whether ``version`` meets the relation ``op bound`` (``None`` op: any version does).

    :param op: ``<<``, ``<=``, ``=``, ``>=``, ``>>`` (rpm's LT/GT are stored as ``<<``/``>>``).
    :raises ValueError: for an unknown operator.
    """
    if op is None or bound is None:
        return True
    if fmt is PackageFormat.DEB:
        result = deb_compare(version, bound)
    else:
        result = rpm_evr_compare(version, bound, ignore_missing_release=True)
    if op == "<<":
        return result < 0
    if op == "<=":
        return result <= 0
    if op == "=":
        return result == 0
    if op == ">=":
        return result >= 0
    if op == ">>":
        return result > 0
    raise ValueError(f"unknown version operator {op!r}")


def upstream_version(version: str) -> str:
    """The upstream part of a full version: no epoch, no Debian revision or rpm release."""
    _, upstream, _ = split_evr(version)
    return upstream


def _isalnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _isdigit(ch: str) -> bool:
    return ch.isascii() and ch.isdigit()


def _isalpha(ch: str) -> bool:
    return ch.isascii() and ch.isalpha()
