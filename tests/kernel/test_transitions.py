"""The transition table: rows name statements of the kernel, known states and events only,
and the kernel performs transitions through it (an event no row ran is refused)."""

from __future__ import annotations

import pytest

from kernel import statements as st
from kernel.events import EventType
from kernel.states import ControlState, OccurrenceStatus
from kernel.testing import memory_kernel
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions import occurrences as T
from kernel.transitions.jobs import OPERATOR_ENABLES_JOB
from kernel.transitions.limits import OPERATOR_SETS_POOL_LIMIT, RATE_TRANSITIONS
from kernel.transitions.occurrences import (
    BUDGET_TRANSITIONS,
    CONTROL_TRANSITIONS,
    JOB_SOURCE_TRANSITIONS,
    JOB_TRANSITIONS,
    OCCURRENCE_TRANSITIONS,
    POOL_TRANSITIONS,
    TRANSITIONS,
    allowed_pairs,
)


def test_every_row_names_a_statement_of_the_kernel() -> None:
    for row in TRANSITIONS:
        assert getattr(st, T.statement_name(row)) is row.statement, row


def test_rows_use_known_states_only() -> None:
    statuses = {s.value for s in OccurrenceStatus} | {"none"}
    controls = {c.value for c in ControlState} | {"none"}
    for row in OCCURRENCE_TRANSITIONS:
        assert set(row.from_states) | set(row.to_states) <= statuses, row
    for row in CONTROL_TRANSITIONS:
        assert set(row.from_states) | set(row.to_states) <= controls, row
    # Pools and budgets are counters: their rows name the condition the guard decides.
    nouns = (
        (JOB_TRANSITIONS, {"none", "enabled", "disabled"}),
        (JOB_SOURCE_TRANSITIONS, {"none", "owned", "retired"}),
        (POOL_TRANSITIONS, {"none", "room", "full"}),
        (RATE_TRANSITIONS, {"none", "free", "taken"}),
        (BUDGET_TRANSITIONS, {"none", "defined", "room", "spent", "held", "released"}),
    )
    for rows, states in nouns:
        for row in rows:
            assert set(row.from_states) | set(row.to_states) <= states, row


def test_a_cancel_can_end_every_unsettled_status() -> None:
    waiting = (
        OccurrenceStatus.QUEUED,
        OccurrenceStatus.RETRY_WAIT,
        OccurrenceStatus.AWAITING_APPROVAL,
    )
    for status in waiting:
        assert (status, OccurrenceStatus.CANCELLED) in allowed_pairs()
    assert (OccurrenceStatus.RUNNING, OccurrenceStatus.CANCELLED) in allowed_pairs()


def test_an_occurrence_event_needs_a_row_that_ran_in_its_transaction() -> None:
    kernel = memory_kernel()
    try:
        with kernel.engine.begin() as conn:
            tx = Tx(conn, kernel.clock, kernel.dialect)
            tx.emit(EventType.HISTORY_PRUNED)  # not a transition's event
            with pytest.raises(AssertionError, match="occurrence_succeeded appended without"):
                tx.emit(EventType.OCCURRENCE_SUCCEEDED, occurrence_id=1)
            assert door.run(tx, T.OPERATOR_REQUEUES, _requeue_params()) is None  # no such row
            tx.emit(EventType.OCCURRENCE_REQUEUED, occurrence_id=1)
            with pytest.raises(AssertionError):
                tx.emit(EventType.OCCURRENCE_CLAIMED, occurrence_id=1)
            conn.rollback()
    finally:
        kernel.close()


def _requeue_params() -> dict[str, object]:
    return {"occurrence_id": 1, "expected_fence": None, "expected_error_code": None, "now": 0}


def test_a_job_or_pool_event_needs_a_row_that_ran_in_its_transaction() -> None:
    kernel = memory_kernel()
    try:
        with kernel.engine.begin() as conn:
            tx = Tx(conn, kernel.clock, kernel.dialect)
            with pytest.raises(AssertionError, match="job_enabled appended without"):
                tx.emit(EventType.JOB_ENABLED, job_id="j")
            with pytest.raises(AssertionError, match="pool_limit_set appended without"):
                tx.emit(EventType.POOL_LIMIT_SET, pool="p", limit=2)
            enabling = {"job_id": "j", "enabled": True, "now": 0}
            assert door.run(tx, OPERATOR_ENABLES_JOB, enabling) is None  # no such job
            tx.emit(EventType.JOB_ENABLED, job_id="j")
            assert door.run(tx, OPERATOR_SETS_POOL_LIMIT, {"pool": "p", "limit": 2}) is not None
            tx.emit(EventType.POOL_LIMIT_SET, pool="p", limit=2)
            with pytest.raises(AssertionError, match="job_disabled appended without"):
                tx.emit(EventType.JOB_DISABLED, job_id="j")
            conn.rollback()
    finally:
        kernel.close()
