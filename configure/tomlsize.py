"""TOML read and rendered in time linear in its size: what keeps :mod:`configure.tomledit` fast on a big file.

tomlkit builds an object per line, so a config grows costly in proportion to what it holds,
never worse. Three things keep it so (#24.17). A table split across the file (``[a.b]``,
``[c]``, then ``  [a.b.x]``, ``  [a.b.y]``) made tomlkit indent each later part once more than
the one before, so the rendered file grew quadratically (and changed): :func:`parse` keeps the
parts' own indentation. Runs of whole-line comments reach tomlkit folded into one placeholder
line each and come back verbatim in :func:`render`. And what only needs the values
(:func:`configure.tomledit.load`) is read with the standard library's ``tomllib`` where the
Python has it (3.11+), runs of comments skipped (:func:`without_comment_runs`).
"""

from __future__ import annotations

import codecs
import contextlib
import re
import secrets
import sys
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple

import tomlkit
from tomlkit.items import AoT, Table
from tomlkit.toml_document import TOMLDocument

from plumbing.errors import ConfigFormatError

#: two or more consecutive lines that hold only a comment (folded before tomlkit parses)
#: (possessive from 3.11: a plain ``+`` keeps a backtracking record per line, 3x a big file in memory)
_COMMENT_RUN = re.compile(
    rb"(?m)^[ \t]*#[^\n]*\n(?:[ \t]*#[^\n]*\n)" + (b"++" if sys.version_info >= (3, 11) else b"+")
)
_FOLDS = "_gpu_airgap_folds"  #: attribute of a parsed document: its folded comment runs (_Folds)
_HAS_NUL = "_gpu_airgap_nul"  #: attribute of a parsed document: its bytes hold a NUL (see _dumps_linear)


def parse(data: bytes, *, fold: bool = True) -> TOMLDocument:
    """tomlkit's document of ``data`` (UTF-8, or surrogate escapes), comment runs folded when ``fold``.

    It must be rendered with :func:`render`, never ``tomlkit.dumps``.

    :raises TOMLKitError: when ``data`` is not valid TOML.
    """
    folded, folds = _fold_comments(data) if fold else (data, None)
    with _keeping_split_table_indent():
        doc = tomlkit.parse(folded.decode("utf-8", "surrogateescape"))
    setattr(doc, _FOLDS, folds)
    setattr(doc, _HAS_NUL, b"\0" in data)
    return doc


def without_comment_runs(data: bytes) -> bytes:
    """``data`` with each run of whole-line comments as one empty comment (they hold no values), for a reader of values.

    Left as it is when the file has a multi-line string: a line starting with ``#`` may be string text there.
    """
    if b'"""' in data or b"'''" in data:
        return data
    return _COMMENT_RUN.sub(b"#\n", data)


def check_utf8(path: object, data: bytes) -> None:
    """:raises ConfigFormatError: when ``data`` is not UTF-8 (checked in pieces: a big file is not copied)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, len(data), 1 << 22):
            decoder.decode(data[start : start + (1 << 22)])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise ConfigFormatError(path, "is not UTF-8 text, so it cannot be a TOML config") from exc


@dataclass(frozen=True)
class _Folds:
    """Where the comment runs folded out of ``data`` are: placeholder number ``n`` is ``data[spans[n]]``."""

    data: bytes
    spans: List[Tuple[int, int]]
    placeholder: re.Pattern[bytes]  #: a placeholder line, its number in group 1


def _fold_comments(data: bytes) -> Tuple[bytes, Optional[_Folds]]:
    """``data`` with each run of whole-line comments as one placeholder comment, and where the runs were.

    Not done when the file has a multi-line string: a line starting with ``#`` may be string text there.
    """
    if b'"""' in data or b"'''" in data:
        return data, None
    nonce = secrets.token_hex(8).encode()
    spans: List[Tuple[int, int]] = []

    def placeholder(match: re.Match[bytes]) -> bytes:
        spans.append(match.span())
        return b"# gpu-airgap-fold-%s-%d\n" % (nonce, len(spans) - 1)

    folded = _COMMENT_RUN.sub(placeholder, data)
    pattern = re.compile(rb"(?m)^[ \t]*# gpu-airgap-fold-" + nonce + rb"-(\d+)\n")
    return folded, _Folds(data, spans, pattern) if spans else None


@contextlib.contextmanager
def _keeping_split_table_indent() -> Iterator[None]:
    """While tomlkit parses: a table merged into an earlier part of its parent keeps its own indentation.

    tomlkit's ``Table.append`` adds the parent's indentation to the child's, which is right for a
    table a program appends but wrong for one read from the file; on a table split across the file
    it compounds with every part.

    Why a runtime patch (the one place outside tests): the parser builds its ``Table`` objects
    itself and reaches ``Table.append`` from ``Container.append`` when it merges the parts of a
    split table, so there is no parameter, subclass or hook to hand it; after the parse the
    indentation each part had in the file is gone, so it cannot be put right afterwards either.
    The patch is as small as it can be: tomlkit's own ``append`` runs, with the parent's
    indentation blank for the call (then there is none to add), and only while :func:`parse`
    runs (the node tool parses on one thread). It relies on tomlkit 0.15 (pyproject.toml bounds
    it); tests/test_tomledit_size.py fails if a tomlkit release changes what it relies on.
    """
    original = Table.append

    def append(self: Table, key: Any, value: Any) -> Table:
        indent, self.trivia.indent = self.trivia.indent, ""
        try:
            return original(self, key, value)
        finally:
            self.trivia.indent = indent

    setattr(Table, "append", append)  # noqa: B010 - a method of tomlkit's class, put back below
    try:
        yield
    finally:
        setattr(Table, "append", original)  # noqa: B010


def render(doc: TOMLDocument) -> bytes:
    """Serialise ``doc`` (parsed by :func:`parse`): the folded comment runs go back in, in time linear in its size."""
    text = _dumps_linear(doc).encode("utf-8", "surrogateescape")
    folds: Optional[_Folds] = getattr(doc, _FOLDS, None)
    if folds is None:
        return text
    # A placeholder line (wherever the edit moved it, with whatever indentation) becomes its run
    # again: joined from views of the two buffers, so a big file is copied once, not per piece.
    original, rendered = memoryview(folds.data), memoryview(text)
    pieces: List[memoryview] = []
    at = 0
    for match in folds.placeholder.finditer(text):
        start, end = folds.spans[int(match.group(1))]
        pieces += [rendered[at : match.start()], original[start:end]]
        at = match.end()
    pieces.append(rendered[at:])
    return b"".join(pieces)


def _dumps_linear(doc: TOMLDocument) -> str:
    """``tomlkit.dumps(doc)`` in time linear in its size.

    tomlkit renders a table by appending each child to a string and calling ``strip(" ")`` on
    that string before every child table; when the table's header is indented (as in
    ``containerd config default``) each strip copies everything rendered so far. A NUL in front of
    such a header (TOML allows no NUL anywhere, so none is in the file) stops the strip at once;
    the NULs are taken out again afterwards.
    """
    if getattr(doc, _HAS_NUL, True):
        return tomlkit.dumps(doc)
    marked = [table for table in _tables(doc) if table.trivia.indent[:1] in (" ", "\t")]
    for table in marked:
        table.trivia.indent = "\0" + table.trivia.indent
    try:
        return tomlkit.dumps(doc).replace("\0", "")
    finally:
        for table in marked:
            table.trivia.indent = table.trivia.indent[1:]


def _tables(node: Any) -> Iterator[Table]:
    """Every table below ``node`` (a document, table or array of tables), parents first."""
    if isinstance(node, AoT):
        items: List[Any] = list(node.body)
    else:
        items = [value for _key, value in (node.body if isinstance(node, TOMLDocument) else node.value.body)]
    for item in items:
        if isinstance(item, Table):
            yield item
            yield from _tables(item)
        elif isinstance(item, AoT):
            yield from _tables(item)
