"""One home per kernel decision (issue 37): no registry or re-export stands between a
caller and the code that decides."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import kernel
from kernel.transitions import occurrences as table


def test_a_watchdog_report_needs_no_registry_of_result_hooks() -> None:
    # The facade composes the settle with the watchdog's report (kernel.facade.workers).
    assert importlib.util.find_spec("kernel.occurrences.result_hooks") is None


def test_the_table_does_not_re_export_the_doors_run() -> None:
    for name in ("run", "run_all", "run_count", "run_many"):
        assert not hasattr(table, name), name


KERNEL = Path(kernel.__file__).resolve().parent


def _compares(field: str, ops: tuple[type[ast.cmpop], ...], *, names: bool = False) -> list[str]:
    """``module:line`` of each comparison in kernel/ (``ops``) of ``field``, whether an
    attribute (``OCC.c.field``, SQL) or a key (``row["field"]``, Python); with ``names``,
    a variable of that name too."""
    found = []
    for path in sorted(KERNEL.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare) or not isinstance(node.ops[0], ops):
                continue
            for side in (node.left, *node.comparators):
                named = side.attr if isinstance(side, ast.Attribute) else None
                if names and isinstance(side, ast.Name):
                    named = side.id
                if isinstance(side, ast.Subscript) and isinstance(side.slice, ast.Constant):
                    named = side.slice.value
                if named == field:
                    found.append(f"{path.relative_to(KERNEL)}:{node.lineno}")
    return found


def test_attempts_left_is_decided_in_sql_once_and_mirrored_in_retry_only() -> None:
    places = {
        place.split(":")[0] for place in _compares("max_attempts", (ast.Lt, ast.GtE), names=True)
    }
    assert places == {"statements/predicates.py", "spec/retry.py"}, places


def test_claimable_and_expired_lease_are_one_predicate_each() -> None:
    # claimable_now (available_at has come) and lease_expired (lease_expires_at has passed)
    # in kernel/statements/predicates.py; every reader and statement uses them.
    # (A refused pause request explains itself from the row it reads after the fact.)
    explained = {"occurrences/pausing.py"}
    for field in ("available_at", "lease_expires_at"):
        places = {place.split(":")[0] for place in _compares(field, (ast.LtE,))} - explained
        assert places == {"statements/predicates.py"}, places


def test_few_branches_on_the_back_end_outside_the_transaction_and_the_door() -> None:
    # Whether a row's statement wrote its events is the table's (Transition.logged_on, read
    # by kernel.transitions.door.append); a lock only PostgreSQL takes is Tx.lock's. Reads
    # only: Tx sets the attribute once.
    uses = [
        f"{path.relative_to(KERNEL)}:{node.lineno}"
        for path in sorted(KERNEL.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "is_postgres"
        and isinstance(node.ctx, ast.Load)
    ]
    assert len(uses) <= 6, uses
