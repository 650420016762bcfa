"""Comment- and layout-preserving TOML edits with tomlkit, shared by the TOML engines.

tomlkit keeps comments, key order and formatting of everything we do not touch. It is less good
at *adding*: a new table gets its parent's indentation on the header and its keys at column 0, a
new key gets a blank line pushed in front of the next table, and a table appended after a
comment that introduces the next section separates that comment from its section. :func:`merge`
is the one edit operation and handles all three, so an edited file reads as if a person had
written it, and an untouched file renders to the very bytes it was parsed from.

Size: a big file costs time linear in its size; :mod:`configure.tomlsize` keeps tomlkit so
(#24.17), and :func:`load` reads only the values, with the standard library's ``tomllib`` where
the Python has it (3.11+).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

import tomlkit
from tomlkit.container import OutOfOrderTableProxy
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Comment, Item, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

from configure import tomlsize
from plumbing.errors import ConfigFormatError

_fast: Any  # the standard library's reader (3.11+): values only, many times faster than tomlkit
try:
    import tomllib as _fast  # novermin: python 3.9 and 3.10 nodes take the ImportError branch
except ImportError:  # there tomlkit reads the values too
    _fast = None

Container = Any  # a TOMLDocument or a Table: both behave like a MutableMapping of items
DEFAULT_STEP = "  "  #: indentation per level when the file shows none to copy


def parse(path: object, data: bytes) -> TOMLDocument:
    """Parse ``data`` (the bytes of ``path``) keeping every comment and format detail; :func:`render` writes it.

    Comment runs are folded (:mod:`configure.tomlsize`), so the document must be rendered with
    :func:`render` or :func:`render_over`, never ``tomlkit.dumps``.

    :raises ConfigFormatError: naming the file when it is not valid TOML or not UTF-8.
    """
    tomlsize.check_utf8(path, data)
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
    tomlsize.check_utf8(path, data)
    try:
        values: Dict[str, Any] = _fast.loads(tomlsize.without_comment_runs(data).decode("utf-8"))
        return values
    except _fast.TOMLDecodeError as exc:
        raise ConfigFormatError(path, f"is not valid TOML ({exc}); fix it or restore it first") from exc


def _parse(data: bytes, path: object, advice: str, *, fold: bool = True) -> TOMLDocument:
    try:
        return tomlsize.parse(data, fold=fold)
    except TOMLKitError as exc:
        raise ConfigFormatError(path, f"is not valid TOML ({exc}); {advice}") from exc


def render(doc: TOMLDocument) -> bytes:
    """Serialise ``doc``; an untouched document renders to exactly the bytes it was parsed from."""
    return tomlsize.render(doc)


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
