"""The statements a worker runs per task stay cheap for SQLite to run again and again."""

from __future__ import annotations

import re

from sqlalchemy.dialects import postgresql, sqlite

from kernel import statements as st
from kernel.db.driver import DriverStatement, render_all


def _driver_statements() -> dict[str, DriverStatement]:
    found = {}
    for name in st.__all__:
        value = getattr(st, name)
        for key, statement in value.items() if isinstance(value, dict) else [(None, value)]:
            if isinstance(statement, DriverStatement):
                found[f"{name}[{key}]" if key else name] = statement
    return found


def test_no_driver_statement_binds_a_like_pattern() -> None:
    # SQLite re-prepares a statement whose LIKE pattern is a bound parameter at every
    # run: a bound pattern in the claim made its UPDATE cost three times the settle's.
    statements = _driver_statements()
    assert {"CLAIM", "SETTLE", "OCCURRENCE_FOR_CLAIM"} <= statements.keys()
    bound_like = re.compile(r"\bLIKE\s+\?")
    rendered = {
        name: str(s.statement.compile(dialect=sqlite.dialect())) for name, s in statements.items()
    }
    assert not [name for name, sql in rendered.items() if bound_like.search(sql)]
    # The claim does carry the disabled-job guard, as literals.
    assert "LIKE 'manual:%'" in rendered["CLAIM"] and "LIKE 'at:%'" in rendered["CLAIM"]


def test_render_all_renders_each_statement_for_its_own_dialect_only() -> None:
    # What a worker's main process does before it forks its pool (Kernel.prepare_fork):
    # every statement written for the dialect renders, and none written for the other.
    for dialect in (sqlite.dialect(), postgresql.psycopg.dialect()):
        assert render_all(dialect) > 0
        for name, statement in _driver_statements().items():
            rendered = {key[0] for key in statement._rendered}
            assert (dialect.name in rendered) == (statement.dialect in (None, dialect.name)), name
