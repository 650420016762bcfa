"""The ``--version`` selector: which toolkit release to mirror.

Accepted forms (surrounding whitespace, and spaces inside a range, are ignored)::

    latest              the newest version on the channel (``~rc`` sorts before its release)
    all                 every package upstream's index lists (a full mirror); each toolkit release
                        that resolves is recorded, the newest as for ``latest``
    1.17.8              that upstream version, newest packaging revision/release
    1.17.8-1            exactly that full version
    1.17.*              every upstream version 1.17 or 1.17.<anything>; the newest wins
    >=1.17,<1.18        every clause must hold (ops: = == >= <= > < >> <<); the newest wins

A bound without a revision is compared against the upstream version only, so ``<=1.17.8`` keeps
``1.17.8-1`` (dpkg alone would say ``1.17.8-1 > 1.17.8``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mirror.errors import SelectorError
from mirror.model import PackageFormat
from mirror.release.versions import compare, satisfies, sort_key, upstream_version

_VERSION_RE = re.compile(r"^(?:\d+:)?[0-9][A-Za-z0-9.+~^_]*(?:-[A-Za-z0-9.+~^_]+)?$")
_CLAUSE_RE = re.compile(r"^(==|=|>=|<=|>>|<<|>|<)(.+)$")
_OPS = {"=": "=", "==": "=", ">=": ">=", "<=": "<=", ">": ">>", ">>": ">>", "<": "<<", "<<": "<<"}


@dataclass(frozen=True)
class VersionSelector:
    """A parsed ``--version`` value; build it with :meth:`parse`."""

    text: str  #: the normalised selector as the user wrote it
    kind: str  #: "latest", "all", "exact", "upstream", "wildcard" or "range"
    clauses: tuple[tuple[str, str], ...] = ()  #: (op, bound) pairs; for wildcard ("*", prefix)

    @classmethod
    def parse(cls, text: str) -> VersionSelector:
        """Parse a selector; see the module docstring for the forms.

        :raises SelectorError: for anything else, with the reason.
        """
        value = text.strip()
        if any(ch in value for ch in "<>=,"):
            value = "".join(value.split())  # spaces around operators and commas are fine
        if not value:
            raise SelectorError(
                text, "it is empty; use latest, all, 1.17.8, 1.17.8-1, 1.17.* or '>=1.17,<1.18'"
            )
        if value in ("latest", "all"):
            return cls(value, value)
        if "*" in value:
            prefix = value[:-2] if value.endswith(".*") else ""
            if not _VERSION_RE.match(prefix) or "-" in prefix or "*" in prefix:
                raise SelectorError(text, "a wildcard must look like 1.17.*")
            return cls(value, "wildcard", (("*", prefix),))
        if any(ch in value for ch in "<>=,"):
            clauses = []
            for part in value.split(","):
                match = _CLAUSE_RE.match(part)
                if not match or not _VERSION_RE.match(match.group(2)):
                    raise SelectorError(text, f"{part!r} is not a comparison such as '>=1.17'")
                clauses.append((_OPS[match.group(1)], match.group(2)))
            return cls(value, "range", tuple(clauses))
        if not _VERSION_RE.match(value):
            raise SelectorError(
                text, "use latest, all, a version (1.17.8 or 1.17.8-1), a wildcard (1.17.*) or a range"
            )
        return cls(value, "exact" if "-" in value else "upstream", (("=", value),))

    def matches(self, version: str, fmt: PackageFormat) -> bool:
        """Whether the full package ``version`` is selected."""
        if self.kind in ("latest", "all"):
            return True
        if self.kind == "wildcard":
            up = upstream_version(version)
            prefix = self.clauses[0][1]
            return up == prefix or up.startswith(prefix + ".")
        if self.kind == "exact":
            return compare(version, self.text, fmt) == 0
        return all(self._clause(version, op, bound, fmt) for op, bound in self.clauses)

    def choose(self, versions: Sequence[str], fmt: PackageFormat) -> str | None:
        """The newest of ``versions`` this selector accepts, or None."""
        accepted = [v for v in versions if self.matches(v, fmt)]
        return max(accepted, key=sort_key(fmt)) if accepted else None

    @staticmethod
    def _clause(version: str, op: str, bound: str, fmt: PackageFormat) -> bool:
        if "-" not in bound.split(":")[-1]:
            # No revision in the bound: compare upstream versions (and epochs) only.
            epoch = version.split(":", 1)[0] + ":" if ":" in version else ""
            version = epoch + upstream_version(version)
        return satisfies(version, op, bound, fmt)

    def __str__(self) -> str:
        """The selector as it would be written on the command line."""
        return self.text
