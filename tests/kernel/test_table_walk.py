"""The transition table is the whole truth for occurrences, controls, jobs (and their
sources' ownership), pools and budgets: every statement that changes their state is a
row's, every event a row lists is written only through ``Tx.emit`` (which refuses it in a
transaction that ran no row listing it) or a statement's own insert
(``statements/logged.py``), every other event is named outside the table with why, and
no module outside kernel/statements/ builds DML. Static: nothing runs."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import visitors

from kernel import statements as st
from kernel.db.driver import DriverStatement
from kernel.db.limit_tables import budget_reservations, budget_windows, budgets, pools
from kernel.db.schema import (
    chords,
    controls,
    events,
    job_sources,
    jobs,
    occurrences,
)
from kernel.events import EVENTS_OUTSIDE_THE_TABLE, EventType
from kernel.transitions import occurrences as T

KERNEL = Path(T.__file__).resolve().parent.parent


def _forms(statement: Any) -> Iterator[Any]:
    """The Core statements a statement of kernel.statements stands for."""
    if isinstance(statement, Mapping):
        for each in statement.values():
            yield from _forms(each)
    elif isinstance(statement, DriverStatement):
        yield statement.statement
    else:
        yield statement


#: Tables every write of which changes a state: a job's definition, enabled flag and
#: cursor, which source owns it (and whether that source retired it), a pool's limit and
#: counter, a budget, its windows' counters and reservations, a chord's count-down.
_WHOLLY_STATE = (
    jobs, job_sources, pools, budgets, budget_windows, budget_reservations, chords
)  # fmt: skip


def _parts(statement: Any) -> Iterator[Any]:
    """The statement and the statements of its CTEs (PostgreSQL's data-modifying ones)."""
    yield statement
    if isinstance(statement, sa.ClauseElement):
        yield from (e.element for e in visitors.iterate(statement) if isinstance(e, sa.CTE))


def _changes_state(statement: Any) -> bool:
    """The statement, or a data-modifying CTE in it, writes a state (:func:`_writes_state`)."""
    return any(_writes_state(part) for part in _parts(statement))


def _writes_state(statement: Any) -> bool:
    """An INSERT into, or an UPDATE of the status or state of, occurrences or controls;
    any INSERT, UPDATE or DELETE of a table of ``_WHOLLY_STATE``."""
    if isinstance(statement, sa.Insert | sa.Update | sa.Delete) and any(
        statement.table is table for table in _WHOLLY_STATE
    ):
        return True
    if not isinstance(statement, sa.Insert | sa.Update) or statement.table not in (
        occurrences,
        controls,
    ):
        return False
    if isinstance(statement, sa.Insert):
        return True
    written = {getattr(c, "name", c) for c in statement._values or {}}
    return bool(written & {"status", "state"})


def test_every_statement_that_changes_a_state_is_a_row_of_the_table() -> None:
    reached = {id(form) for row in T.TRANSITIONS for form in _forms(row.statement)}
    outside = [
        name
        for name in st.__all__
        for form in _forms(getattr(st, name))
        if _changes_state(form) and id(form) not in reached
    ]
    assert outside == []


def _sources() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(KERNEL.rglob("*.py")):
        if "migrations" not in path.parts:
            yield str(path.relative_to(KERNEL)), ast.parse(path.read_text(), str(path))


#: The table's modules: the rows and the door that runs them.
_TABLE_MODULES = {
    "transitions/occurrences.py",
    "transitions/controls.py",
    "transitions/door.py",
    "transitions/jobs.py",
    "transitions/limits.py",
    "transitions/chords.py",
}


def _events_written(tree: ast.AST) -> Iterator[str]:
    """The event types ``tree`` names (``EventType.X``, ``E.X``) or appends by a literal
    (``tx.emit("...")``)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("EventType", "E")
            and node.attr in EventType.__members__
        ):
            yield EventType[node.attr].value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("emit")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            yield str(node.args[0].value)


def test_every_event_the_kernel_writes_is_a_rows_or_named_outside_the_table() -> None:
    """Every event type a kernel module outside the table's own names is listed by a row
    or in ``EVENTS_OUTSIDE_THE_TABLE`` (each with why no row moves), never both; that list
    names no event the kernel does not write."""
    written = {
        (name, event)
        for name, tree in _sources()
        if name not in _TABLE_MODULES
        for event in _events_written(tree)
    }
    outside = set(EVENTS_OUTSIDE_THE_TABLE)
    neither = sorted(
        f"{name}: {event}"
        for name, event in written
        if event not in T.TRANSITION_EVENTS and event not in outside
    )
    assert neither == []
    assert T.TRANSITION_EVENTS & outside == set()
    assert outside <= {event for _, event in written}


_DML = ("insert", "update", "delete")


def _builds(node: ast.AST, verbs: tuple[str, ...], table: str | None = None) -> bool:
    """A call of one of ``verbs`` (``sa.insert``, a dialect's ``insert``...), of ``table``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        name = func.attr if owner in ("sa", "postgresql", "sqlite", "tx") else ""
    else:
        name = getattr(func, "id", "")
    if name not in verbs:
        return False
    if table is None:
        return True
    return bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id == table


def test_only_statements_build_dml_event_inserts_included() -> None:
    event_writers = sorted(
        name
        for name, tree in _sources()
        if any(_builds(n, ("insert",), events.name) for n in ast.walk(tree))
    )
    # Every INSERT INTO events is built in statements/logged.py: the rows Tx.emit appends
    # from Python and a statement's own events on PostgreSQL, the same columns either way.
    assert set(event_writers) == {"statements/logged.py"}
    outside = sorted(
        name
        for name, tree in _sources()
        if not name.startswith("statements/") and any(_builds(n, _DML) for n in ast.walk(tree))
    )
    assert outside == []


def test_the_walk_reaches_every_table_of_the_nouns() -> None:
    written = {
        part.table.name
        for name in st.__all__
        for form in _forms(getattr(st, name))
        for part in _parts(form)
        if _writes_state(part)
    }
    assert {table.name for table in (occurrences, controls, *_WHOLLY_STATE)} <= written


def _statements_named(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, name) of each statement of kernel.statements ``tree`` names: ``st.NAME``,
    or a name imported from kernel.statements."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "st":
                yield node.lineno, node.attr
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "kernel.statements"
        ):
            yield from ((node.lineno, alias.name) for alias in node.names)


def test_a_rows_statement_runs_only_through_the_door() -> None:
    """No kernel module outside kernel/statements/ and the table's names a row's statement:
    the kernel reaches it through its row (``door.run``, ``run_all``, ``run_count``) only."""
    rows = {T.statement_name(row) for row in T.TRANSITIONS}
    named = sorted(
        f"{name}:{line} {statement}"
        for name, tree in _sources()
        if not name.startswith("statements/") and name not in _TABLE_MODULES
        for line, statement in _statements_named(tree)
        if statement in rows
    )
    assert named == []
