"""Comment- and layout-preserving TOML edits with tomlkit, shared by the TOML engines.

tomlkit keeps comments, key order and formatting of everything we do not touch. It is less good
at *adding*: a new table gets its parent's indentation on the header and its keys at column 0, a
new key gets a blank line pushed in front of the next table, and a table appended after a
comment that introduces the next section separates that comment from its section. :func:`merge`
is the one edit operation and handles all three, so an edited file reads as if a person had
written it, and an untouched file renders to the very bytes it was parsed from.

Size: tomlkit builds an object per line, so a config grows costly in proportion to what it
holds, never worse. Three things keep it so (#24.17). A table split across the file (``[a.b]``,
``[c]``, then ``  [a.b.x]``, ``  [a.b.y]``) made tomlkit indent each later part once more than
the one before, so the rendered file grew quadratically (and changed): :func:`parse` keeps the
parts' own indentation. Runs of whole-line comments reach tomlkit folded into one placeholder
line each and come back verbatim in :func:`render`. And what only needs the values
(:func:`load`) is read with the standard library's ``tomllib`` where the Python has it (3.11+).
"""

from __future__ import annotations

import codecs
import contextlib
import re
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import tomlkit
from tomlkit.container import OutOfOrderTableProxy
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Comment, Item, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

from plumbing.errors import ConfigFormatError

_fast: Any  # the standard library's reader (3.11+): values only, many times faster than tomlkit
try:
    import tomllib as _fast  # novermin: python 3.9 and 3.10 nodes take the ImportError branch
except ImportError:  # there tomlkit reads the values too
    _fast = None

Container = Any  # a TOMLDocument or a Table: both behave like a MutableMapping of items
DEFAULT_STEP = "  "  #: indentation per level when the file shows none to copy
#: two or more consecutive lines that hold only a comment (folded before tomlkit parses)
#: (possessive from 3.11: a plain ``+`` keeps a backtracking record per line, 3x a big file in memory)
_COMMENT_RUN = re.compile(
    rb"(?m)^[ \t]*#[^\n]*\n(?:[ \t]*#[^\n]*\n)" + (b"++" if sys.version_info >= (3, 11) else b"+")
)
_FOLDS = "_gpu_airgap_folds"  #: attribute of a parsed document: its folded comment runs (_Folds)
_HAS_NUL = "_gpu_airgap_nul"  #: attribute of a parsed document: its bytes hold a NUL (see _dumps_linear)


def parse(path: object, data: bytes) -> TOMLDocument:
    """Parse ``data`` (the bytes of ``path``) keeping every comment and format detail; :func:`render` writes it.

    Comment runs are folded (module docstring), so the document must be rendered with
    :func:`render` or :func:`render_over`, never ``tomlkit.dumps``.

    :raises ConfigFormatError: naming the file when it is not valid TOML or not UTF-8.
    """
    _check_utf8(path, data)
    return _parse(data, path, "fix it or restore it first")


def parse_text(text: str, path: object) -> TOMLDocument:
    """Parse already-decoded ``text`` of ``path`` (crio.conf and drop-ins, the toolkit config).

    :raises ConfigFormatError: naming the file when it is not valid TOML.
    """
    return _parse(text.encode("utf-8", "surrogateescape"), path, "fix or remove it first", fold=False)


def load(path: object, data: bytes) -> Dict[str, Any]:
    """Only the values of TOML ``data`` (of ``path``), read as fast as this Python can.

    :raises ConfigFormatError: naming the file when it is not valid TOML or not UTF-8.
    """
    if _fast is None:
        return dict(parse(path, data).unwrap())
    _check_utf8(path, data)
    if b'"""' not in data and b"'''" not in data:
        data = _COMMENT_RUN.sub(b"#\n", data)  # comments hold no values: skip them in C
    try:
        values: Dict[str, Any] = _fast.loads(data.decode("utf-8"))
        return values
    except _fast.TOMLDecodeError as exc:
        raise ConfigFormatError(path, f"is not valid TOML ({exc}); fix it or restore it first") from exc


def _check_utf8(path: object, data: bytes) -> None:
    """:raises ConfigFormatError: when ``data`` is not UTF-8 (checked in pieces: a big file is not copied)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, len(data), 1 << 22):
            decoder.decode(data[start : start + (1 << 22)])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise ConfigFormatError(path, "is not UTF-8 text, so it cannot be a TOML config") from exc


def _parse(data: bytes, path: object, advice: str, *, fold: bool = True) -> TOMLDocument:
    folded, folds = _fold_comments(data) if fold else (data, None)
    try:
        with _keeping_split_table_indent():
            doc = tomlkit.parse(folded.decode("utf-8", "surrogateescape"))
    except TOMLKitError as exc:
        raise ConfigFormatError(path, f"is not valid TOML ({exc}); {advice}") from exc
    setattr(doc, _FOLDS, folds)
    setattr(doc, _HAS_NUL, b"\0" in data)
    return doc


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
    """Serialise ``doc``; an untouched document renders to exactly the bytes it was parsed from."""
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


def render_over(old: Optional[bytes], doc: TOMLDocument) -> bytes:
    """``doc`` rendered, or ``old`` itself when it already holds the same values.

    An edit that changes no value can still move whitespace (tomlkit re-lays a table it touched),
    and a file whose bytes change is a changed config: the engine would be restarted for nothing
    and a re-run would never report "already registered".
    """
    return render_with_values(old, doc)[0]


def render_with_values(
    old: Optional[bytes], doc: TOMLDocument, old_values: Optional[Dict[str, Any]] = None
) -> Tuple[bytes, Optional[Dict[str, Any]]]:
    """:func:`render_over`, and the values of the bytes it returns (None when it did not need to read them).

    :param old_values: the values of ``old`` when the caller has them already (each read of a big file costs).
    """
    new = render(doc)
    if old is None or old == new:
        return new, old_values
    try:
        before = old_values if old_values is not None else load("", old)
        after = load("", new)
    except ConfigFormatError:
        return new, None
    return (old, before) if before == after else (new, after)


def merge(container: Container, desired: Mapping[str, Any], *, path: object, where: str = "") -> None:
    """Make ``container`` hold every value of the nested mapping ``desired``; touch nothing else.

    Existing keys keep their place and comment (and are not rewritten when already equal); a
    missing table is built complete and appended laid out like its siblings.

    :param path: the file whose content ``container`` holds, for error messages.
    :param where: dotted path of ``container``, for error messages.
    :raises ConfigFormatError: when the file has a plain value where ``desired`` needs a table.
    """
    if isinstance(container, OutOfOrderTableProxy):
        _merge_proxy(container, desired, path=path, where=where)
    else:
        _merge_parts([container], desired, path=path, where=where)


def _merge_parts(parts: List[Container], desired: Mapping[str, Any], *, path: object, where: str) -> None:
    """:func:`merge` into one table written in ``parts`` (several when the file splits it: ``[a]`` ... ``[a.b]``).

    Each key is looked up in the parts' own bodies: asking tomlkit for a split table builds a
    merged copy of all its parts every time (quadratic on a big file).
    """
    for key, value in desired.items():
        dotted = f"{where}.{key}" if where else key
        holders = [part for part in parts if any(k is not None and k.key == key for k, _v in _body(part))]
        if not isinstance(value, Mapping):
            set_value(holders[0] if holders else parts[0], key, value)
            continue
        children = [item for part in holders for k, item in _body(part) if k is not None and k.key == key]
        if not children:
            _append_table(parts[0], key, value)
        elif all(isinstance(child, Table) for child in children):
            _merge_parts(children, value, path=path, where=dotted)
        else:
            raise ConfigFormatError(path, f"{dotted} is a value, not a table; cannot add to it")


def _merge_proxy(container: Container, desired: Mapping[str, Any], *, path: object, where: str) -> None:
    """:func:`merge` through tomlkit's view of a split table (a caller handed one in)."""
    for key, value in desired.items():
        dotted = f"{where}.{key}" if where else key
        if not isinstance(value, Mapping):
            set_value(container, key, value)
        elif key not in container:
            _append_table(container, key, value)
        elif isinstance(container[key], (Table, TOMLDocument, OutOfOrderTableProxy)):
            merge(container[key], value, path=path, where=dotted)
        else:
            raise ConfigFormatError(path, f"{dotted} is a value, not a table; cannot add to it")


def set_value(table: Container, key: str, value: Any) -> None:
    """Set ``table[key]`` to a plain value, keeping the key's position and comment when it exists."""
    if isinstance(table, OutOfOrderTableProxy):
        # A table split across the file ([a] ... [b] ... [a.c]); tomlkit routes the write itself.
        if not (key in table and table[key] == value and type(table[key]) is type(value)):
            table[key] = value
        return
    if key in table:
        old = table.item(key)
        current = old.unwrap() if isinstance(old, Item) else old
        if not (current == value and type(current) is type(value)):
            table[key] = value
        return
    indent = _key_indent(table) if isinstance(table, Table) else ""
    # tomlkit pushes a blank line in front of the table after an inserted key; keep the file's spacing.
    following = [(item, item.trivia.indent) for _k, item in _body(table) if isinstance(item, (Table, AoT))]
    hidden = _hide_comments_before_next_section(table)
    table.add(key, value)
    _show_comments(table, hidden)
    for item, saved in following:
        item.trivia.indent = saved
    new = table.item(key)  # table[key] would hand back a plain bool for a Bool item
    new.trivia.indent = indent


def _append_table(parent: Container, key: str, value: Mapping[str, Any]) -> None:
    if isinstance(parent, OutOfOrderTableProxy):
        parent[key] = _build(value)
        return
    header, step = _child_indent(parent)
    table = _build(value)
    previous_leaf = _last_leaf(parent)
    parent.append(key, table)
    layout_table(table, header, step)
    if previous_leaf is not None:
        # A trailing comment (and blank line) at the end of the previous section introduces the
        # section that follows it in the file, so it moves below the table we appended.
        run = _pop_trailing_run(previous_leaf)
        (_last_leaf(table) or table).value.body.extend(run)


def _build(data: Mapping[str, Any]) -> Table:
    """A complete new table: plain values first (TOML needs them above sub-tables), then tables."""
    values = {k: v for k, v in data.items() if not isinstance(v, Mapping)}
    table = tomlkit.table(is_super_table=not values and bool(data))
    for key, value in values.items():
        table.add(key, value)
    for key, value in data.items():
        if isinstance(value, Mapping):
            table.add(key, _build(value))
    return table


def layout_table(table: Table, header_indent: str, step: str) -> None:
    """Indent a table we created: header at ``header_indent``, keys and sub-tables one ``step`` in.

    ``header_indent`` may start with newlines (blank lines before the header); sub-tables get the
    same blank lines, keys none. A super table prints no header, so its children take its place.
    """
    table.trivia.indent = header_indent
    column = _last_line(header_indent)
    blank = header_indent[: len(header_indent) - len(column)]
    inner = column if table.is_super_table() else column + step
    for _key, item in table.value.body:
        if isinstance(item, Table):
            layout_table(item, blank + inner, step)
        elif _is_value(item):
            item.trivia.indent = inner


def _child_indent(parent: Container) -> Tuple[str, str]:
    """Header indentation for a new child table of ``parent``, and the file's indent step.

    The header copies the last sibling table's whole indent, blank lines included, so a file
    that separates its tables with a blank line keeps doing so.
    """
    found = _indent_step(parent)
    step = DEFAULT_STEP if found is None else found
    children = [item for _k, item in _body(parent) if isinstance(item, Table) and not item.is_super_table()]
    if children:
        return str(children[-1].trivia.indent), step
    if isinstance(parent, Table) and not parent.is_super_table():
        return _last_line(parent.trivia.indent) + step, step
    return "", step


def _indent_step(node: Container) -> Optional[str]:
    """How far keys sit inside their table header in this file; None when nothing shows it."""
    if isinstance(node, Table) and not node.is_super_table():
        keys = [item for _k, item in node.value.body if _is_value(item)]
        if keys:
            extra = len(_last_line(keys[0].trivia.indent)) - len(_last_line(node.trivia.indent))
            return " " * max(extra, 0)
    for _key, item in _body(node):
        if isinstance(item, Table):
            found = _indent_step(item)
            if found is not None:
                return found
    return None


def _key_indent(table: Table) -> str:
    values = [item for _k, item in table.value.body if _is_value(item)]
    if values:
        return _last_line(values[-1].trivia.indent)
    step = _indent_step(table)
    return _last_line(table.trivia.indent) + (step if step is not None else DEFAULT_STEP)


def _hide_comments_before_next_section(table: Container) -> List[Tuple[Whitespace, Comment]]:
    """Stand empty whitespace in for the comments that introduce the next section (or end the table).

    tomlkit adds a key after the last item that is not a table or plain whitespace, so a comment
    above the next table header would end up above our key instead. With the comments out of the
    way it places the key before them; :func:`_show_comments` puts them back. Swapping entries of
    the body in place keeps every key's position, so tomlkit's own key index stays right.
    """
    body: List[Tuple[Any, Any]] = table.value.body if isinstance(table, Table) else table.body
    end = next(
        (
            i
            for i, (k, v) in enumerate(body)
            if isinstance(v, (Table, AoT)) and k is not None and not k.is_dotted()
        ),
        len(body),
    )
    start = end
    while start > 0 and body[start - 1][0] is None and isinstance(body[start - 1][1], (Comment, Whitespace)):
        start -= 1
    hidden: List[Tuple[Whitespace, Comment]] = []
    for i in range(start, end):
        if isinstance(body[i][1], Comment):
            hidden.append((Whitespace(""), body[i][1]))
            body[i] = (None, hidden[-1][0])
    return hidden


def _show_comments(table: Container, hidden: List[Tuple[Whitespace, Comment]]) -> None:
    body: List[Tuple[Any, Any]] = table.value.body if isinstance(table, Table) else table.body
    comments = {id(stand_in): comment for stand_in, comment in hidden}
    for i, (key, item) in enumerate(body):
        if key is None and id(item) in comments:
            body[i] = (None, comments[id(item)])


def _last_leaf(node: Container) -> Optional[Table]:
    """The table whose body is rendered last inside ``node`` (None when ``node`` has no tables)."""
    last: Optional[Table] = None
    for _key, item in _body(node):
        if isinstance(item, Table):
            last = item
        elif _is_value(item):
            last = None  # a value after the last table is rendered after it
    if last is None:
        return None
    deeper = _last_leaf(last)
    return deeper if deeper is not None else last


def _pop_trailing_run(table: Table) -> List[Tuple[Any, Any]]:
    body: List[Tuple[Any, Any]] = table.value.body
    start = len(body)
    while start > 0 and body[start - 1][0] is None and isinstance(body[start - 1][1], (Comment, Whitespace)):
        start -= 1
    run = body[start:]
    del body[start:]
    return run


def _last_line(indent: str) -> str:
    return indent.split("\n")[-1]


def _body(node: Container) -> List[Tuple[Any, Any]]:
    if isinstance(node, Table):
        return list(node.value.body)
    if isinstance(node, TOMLDocument):
        return list(node.body)
    return []


def _is_value(item: Any) -> bool:
    return item is not None and not isinstance(item, (Whitespace, Comment, Table, AoT))
