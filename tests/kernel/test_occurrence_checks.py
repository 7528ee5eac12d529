"""The CHECK constraints of ``occurrences`` refuse each impossible state by name on both back
ends, and PostgreSQL's compact spelling of them (kernel/db/checks.py, revision 0026)
decides exactly as the portable one, at a smaller parse per written row."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import sqlalchemy as sa

from kernel.db.checks import OCCURRENCE_CHECKS, OCCURRENCE_CHECKS_POSTGRESQL
from kernel.errors import StateConflict
from kernel.states import OccurrenceStatus
from kernel.store import Kernel
from tests.kernel.conftest import Harness

_LEASE = "ck_occurrences_lease_iff_running"
_CANCEL = "ck_occurrences_no_waiting_cancel"
_SETTLED = "ck_occurrences_settled_iff_final"
_COUNTERS = "ck_occurrences_counters"

#: From a queued occurrence, each change writes one impossible state, refused by one check.
FORBIDDEN = [
    ("status = 'lost'", "ck_occurrences_status"),
    ("status = 'running', lease_owner = 'w'", _LEASE),
    ("status = 'running', lease_expires_at = 1", _LEASE),
    ("lease_owner = 'w', lease_expires_at = 1", _LEASE),
    ("lease_expires_at = 1", _LEASE),
    ("cancel_requested = true", _CANCEL),
    ("status = 'retry_wait', cancel_requested = true", _CANCEL),
    ("status = 'succeeded'", _SETTLED),
    ("settled_at = 5", _SETTLED),
    ("fence = -1", _COUNTERS),
    ("attempt = -1", _COUNTERS),
    ("max_attempts = 0", _COUNTERS),
]
#: The states next to them that are possible: the guard is no stronger than the invariant.
ALLOWED = [
    "status = 'running', lease_owner = 'w', lease_expires_at = 1",
    "status = 'succeeded', settled_at = 5",
    "status = 'cancelled', cancel_requested = true, settled_at = 5",
    "status = 'needs_adjudication', cancel_requested = true",
    "status = 'awaiting_approval'",
]


def _write(kernel: Kernel, occurrence_id: int, change: str) -> None:
    def write(tx: Any) -> None:
        tx.conn.execute(sa.text(f"UPDATE occurrences SET {change} WHERE id = {occurrence_id}"))

    kernel._session.run(write)


@pytest.mark.parametrize(("change", "check"), FORBIDDEN)
def test_each_impossible_state_is_refused_by_its_check(k: Harness, change: str, check: str) -> None:
    occurrence_id = k.occurrences()[0]
    with pytest.raises(StateConflict) as refused:
        _write(k.kernel, occurrence_id, change)
    assert refused.value.details["constraint"] == check


@pytest.mark.parametrize("change", ALLOWED)
def test_the_possible_states_beside_them_are_written(k: Harness, change: str) -> None:
    occurrence_id = k.occurrences()[0]
    _write(k.kernel, occurrence_id, change)


def _postgres(kernel: Kernel) -> None:
    if kernel.engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's spelling of the checks; SQLite keeps the portable one")


def test_postgresql_s_compact_checks_decide_as_the_portable_ones_on_every_state(
    kernel: Kernel,
) -> None:
    _postgres(kernel)
    assert [name for name, _ in OCCURRENCE_CHECKS_POSTGRESQL] == [n for n, _ in OCCURRENCE_CHECKS]
    statuses = [s.value for s in OccurrenceStatus] + ["lost"]
    counters = [(0, 0, 1), (-1, 0, 1), (0, -1, 1), (0, 0, 0), (2, 3, 3)]
    rows = [
        (status, owner, until, cancel, settled, *counted)
        for status, owner, until, cancel, settled, counted in itertools.product(
            statuses, [None, "w"], [None, 1], [False, True], [None, 5], counters
        )
    ]
    columns = (
        "status, lease_owner, lease_expires_at, cancel_requested, settled_at,"
        " fence, attempt, max_attempts"
    )
    values = ", ".join(
        f"(CAST(:s{i} AS VARCHAR(24)), CAST(:o{i} AS VARCHAR(200)), CAST(:u{i} AS BIGINT),"
        f" CAST(:c{i} AS BOOLEAN), CAST(:t{i} AS BIGINT), :f{i}, :a{i}, :m{i})"
        for i in range(len(rows))
    )
    params = {
        f"{key}{i}": value
        for i, row in enumerate(rows)
        for key, value in zip("souctfam", row, strict=True)
    }
    # A CHECK passes unless its condition is false (NULL passes).
    decided = ", ".join(
        f"COALESCE(({portable}), true), COALESCE(({compact}), true)"
        for (_, portable), (_, compact) in zip(
            OCCURRENCE_CHECKS, OCCURRENCE_CHECKS_POSTGRESQL, strict=True
        )
    )
    with kernel.engine.connect() as conn:
        results = conn.execute(
            sa.text(f"SELECT {decided} FROM (VALUES {values}) AS v ({columns})"), params
        ).all()
    assert len(results) == len(rows) == len(statuses) * 2 * 2 * 2 * 2 * len(counters)
    for row, result in zip(rows, results, strict=True):
        for i, (name, _) in enumerate(OCCURRENCE_CHECKS):
            assert result[2 * i] == result[2 * i + 1], (name, row)
    # Every check refuses some row and admits some: the comparison is not vacuous.
    for i in range(len(OCCURRENCE_CHECKS)):
        assert {r[2 * i] for r in results} == {True, False}


def test_postgresql_parses_little_per_written_row(kernel: Kernel) -> None:
    # PostgreSQL reads each CHECK's stored parse tree again in every statement that writes
    # a row (ExecRelCheck): ~13 % of the backend's CPU on the batch's settle-and-claim
    # (bench/README.md, session 22): the stored trees are kept small.
    _postgres(kernel)
    with kernel.engine.connect() as conn:
        stored = dict(
            conn.execute(
                sa.text(
                    "SELECT conname, length(conbin::text) FROM pg_constraint"
                    " WHERE conrelid = 'occurrences'::regclass AND contype = 'c'"
                )
            ).all()
        )
    assert set(stored) == {name for name, _ in OCCURRENCE_CHECKS}
    assert sum(stored.values()) <= 6000, stored
