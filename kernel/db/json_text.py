"""``records.dumps``'s canonical JSON, built in SQL: for the statements that write an
event's data in the statement itself (PostgreSQL: the event costs no round trip).

The text is the same, byte for byte, as :func:`kernel.records.dumps` of the same object
(sorted keys, no spaces, non-ASCII as is, control characters escaped as Python's
``json`` escapes them); ``tests/kernel/test_json_text.py`` compares them on SQLite and
PostgreSQL. A string member is quoted by the database (``to_json`` on PostgreSQL,
``json_quote`` on SQLite), an integer one written as its digits, a NULL as ``null``.
:func:`json_member` reads one top-level member of such a text back, as text.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from kernel.records import dumps

__all__ = ["json_member", "json_object", "omitted_when"]


class _JsonText(sa.types.TypeDecorator[str]):
    """Text that is already canonical JSON (a :func:`json_object`): nested as is."""

    impl = sa.Text
    cache_ok = True


class _quoted(FunctionElement[str]):
    """A string as a JSON string, or ``null``."""

    type = sa.Text()
    inherit_cache = True


@compiles(_quoted, "postgresql")
def _quoted_postgresql(element: _quoted, compiler: SQLCompiler, **kw: Any) -> str:
    value = compiler.process(element.clauses, **kw)
    return f"COALESCE(CAST(to_json(CAST({value} AS TEXT)) AS TEXT), 'null')"


@compiles(_quoted, "sqlite")
def _quoted_sqlite(element: _quoted, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_quote(CAST({compiler.process(element.clauses, **kw)} AS TEXT))"


def _member(value: object, name: str) -> sa.ColumnElement[str] | str:
    """The JSON text of one member: SQL for an expression, the text itself for a constant."""
    if not isinstance(value, sa.ColumnElement):
        return dumps(value)
    if isinstance(value.type, _JsonText):
        return value
    if isinstance(value.type, sa.Integer):
        return sa.func.coalesce(sa.cast(value, sa.Text), sa.literal_column("'null'", sa.Text))
    if isinstance(value.type, sa.String):
        return _quoted(value)
    raise TypeError(f"json_object member {name!r}: type it Integer or String, not {value.type!r}")


class omitted_when:  # noqa: N801 - reads as a member's wrapper: x=omitted_when(cond, expr)
    """A :func:`json_object` member left out of the object where ``condition`` holds
    (``records.dumps`` of a dict built without that key)."""

    __slots__ = ("condition", "value")

    def __init__(self, condition: sa.ColumnElement[bool], value: object) -> None:
        self.condition = condition
        self.value = value


def json_object(**members: object) -> sa.ColumnElement[str]:
    """``records.dumps(members)`` as one SQL expression.

    Args:
        members: each an SQL expression typed Integer or String (a bind parameter needs
            its ``type_``), another :func:`json_object`, a constant (written by
            ``records.dumps`` when the statement is built), or one of these
            :class:`omitted_when` a condition holds (not the first member by name).

    Raises:
        TypeError: a member's SQL type is neither (its JSON form would be a guess), or
            the first member may be omitted.
    """
    parts: list[sa.ColumnElement[str] | str] = []
    for index, name in enumerate(sorted(members)):
        value = members[name]
        head = ("{" if index == 0 else ",") + dumps(name) + ":"
        if isinstance(value, omitted_when):
            if index == 0:
                raise TypeError(f"json_object member {name!r}: the first cannot be omitted")
            text = sa.literal(head, sa.Text).concat(_member(value.value, name))
            parts.append(sa.case((value.condition, sa.literal("", sa.Text)), else_=text))
            continue
        parts.append(head)
        parts.append(_member(value, name))
    parts.append("}" if members else "{}")
    # Adjacent constant text as one literal: fewer parameters per statement.
    merged: list[sa.ColumnElement[str] | str] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    pieces = [sa.literal(p, sa.Text) if isinstance(p, str) else p for p in merged]
    text = pieces[0]
    for piece in pieces[1:]:
        text = text.concat(piece)
    return sa.type_coerce(text, _JsonText())


class json_member(FunctionElement[str]):  # noqa: N801 - reads as the SQL function it is
    """``json_member(text, name)``: the top-level member ``name`` of the JSON object
    ``text`` as text (NULL if absent, or for a NULL text)."""

    type = sa.Text()
    inherit_cache = True

    def __init__(self, text: sa.ColumnElement[Any], name: str) -> None:
        super().__init__(text, sa.literal_column(f"'{name}'"))
        if not name.isidentifier():
            raise ValueError(f"json_member: {name!r} is no plain member name")


@compiles(json_member, "postgresql")
def _json_member_postgresql(element: json_member, compiler: SQLCompiler, **kw: Any) -> str:
    text, name = (compiler.process(c, **kw) for c in element.clauses)
    return f"(CAST({text} AS JSON) ->> {name})"


@compiles(json_member, "sqlite")
def _json_member_sqlite(element: json_member, compiler: SQLCompiler, **kw: Any) -> str:
    text, name = element.clauses
    path = compiler.process(name, **kw).replace("'", "")
    return f"json_extract({compiler.process(text, **kw)}, '$.{path}')"
