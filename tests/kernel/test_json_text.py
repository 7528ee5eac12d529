"""The canonical JSON a statement builds in SQL (:func:`kernel.db.json_text.json_object`)
is ``records.dumps``'s, byte for byte, on both back ends, for awkward values."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from kernel.db.json_text import json_object, omitted_when
from kernel.records import dumps

STRINGS = [
    "",
    "plain",
    'a "quote", a \\ backslash, a / slash',
    "ünïcødé ✓ 日本語 𝄞 😀",
    "\n\t\r\b\f\x01\x1f\x7f\x80\x9f",
    "\u2028\u2029 \ufeff",
    "</script><!-- '' -->",
    '{"not": ["json"]}',
]
INTEGERS = [0, 1, -1, 2**31, 2**63 - 1, -(2**63)]


@pytest.fixture
def engine(kernel_url: str) -> Iterator[sa.Engine]:
    made = sa.create_engine(kernel_url)
    yield made
    made.dispose()


def _built(engine: sa.Engine, expression: sa.ColumnElement[str]) -> str:
    with engine.connect() as conn:
        text = conn.execute(sa.select(expression)).scalar_one()
    assert isinstance(text, str)
    return text


@pytest.mark.parametrize("value", STRINGS)
def test_a_string_member_is_quoted_as_records_dumps_quotes_it(
    engine: sa.Engine, value: str
) -> None:
    built = json_object(text=sa.bindparam("v", value, type_=sa.String))
    assert _built(engine, built) == dumps({"text": value})


def test_numbers_nulls_constants_and_nesting_are_written_as_records_dumps_writes_them(
    engine: sa.Engine,
) -> None:
    members = {f"n{i}": value for i, value in enumerate(INTEGERS)}
    built = json_object(
        # keys out of order and of awkward text: the output sorts and quotes them
        zeta=sa.bindparam("zeta", None, type_=sa.BigInteger),
        alpha=sa.bindparam("alpha", None, type_=sa.String),
        **{'k"ey ✓': "constant ünïcødé", "const": [1, {"b": None, "a": "x"}], "nil": None},
        inner=json_object(
            owner=sa.bindparam("owner", 'w"1 ✓', type_=sa.String),
            **{k: sa.bindparam(k, v, type_=sa.BigInteger) for k, v in members.items()},
        ),
        empty=json_object(),
    )
    expected = {
        "zeta": None,
        "alpha": None,
        'k"ey ✓': "constant ünïcødé",
        "const": [1, {"b": None, "a": "x"}],
        "nil": None,
        "inner": {"owner": 'w"1 ✓', **members},
        "empty": {},
    }
    assert _built(engine, built) == dumps(expected)


def test_a_member_of_no_json_type_is_refused_when_the_statement_is_built() -> None:
    with pytest.raises(TypeError, match="'when'"):
        json_object(when=sa.bindparam("when"))


@pytest.mark.parametrize("present", [(), ("b",), ("d",), ("b", "c", "d")])
def test_a_member_omitted_when_its_condition_holds_is_left_out(
    engine: sa.Engine, present: tuple[str, ...]
) -> None:
    # An enqueue's event carries priority, parent and deadline only when the run has them.
    values = {name: sa.bindparam(name, 7 if name in present else None, type_=sa.BigInteger)
              for name in "bcd"}  # fmt: skip
    built = json_object(
        a=True, **{name: omitted_when(value.is_(None), value) for name, value in values.items()}
    )
    assert _built(engine, built) == dumps({"a": True, **{name: 7 for name in present}})
    with pytest.raises(TypeError, match="first"):
        json_object(a=omitted_when(sa.true(), 1), b=1)
