"""The transition table: rows name statements of the kernel, known states and events only,
and the kernel performs transitions through it (an event no row ran is refused)."""

from __future__ import annotations

import pytest

from kernel import statements as st
from kernel import transitions as T
from kernel.events import EventType
from kernel.states import ControlState, OccurrenceStatus
from kernel.testing import memory_kernel
from kernel.transitions import CONTROL_TRANSITIONS, OCCURRENCE_TRANSITIONS, allowed_pairs
from kernel.tx import Tx


def test_every_row_names_a_statement_of_the_kernel() -> None:
    for row in (*OCCURRENCE_TRANSITIONS, *CONTROL_TRANSITIONS):
        assert getattr(st, row.statement_name) is row.statement, row


def test_rows_use_known_states_only() -> None:
    statuses = {s.value for s in OccurrenceStatus} | {"none"}
    controls = {c.value for c in ControlState} | {"none"}
    for row in OCCURRENCE_TRANSITIONS:
        assert set(row.from_states) | set(row.to_states) <= statuses, row
    for row in CONTROL_TRANSITIONS:
        assert set(row.from_states) | set(row.to_states) <= controls, row


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
            tx.emit(EventType.JOB_DEFINED, job_id="j")  # not a transition's event
            with pytest.raises(AssertionError, match="occurrence_succeeded appended without"):
                tx.emit(EventType.OCCURRENCE_SUCCEEDED, occurrence_id=1)
            assert T.run(tx, T.OPERATOR_REQUEUES, _requeue_params()) is None  # no such row
            tx.emit(EventType.OCCURRENCE_REQUEUED, occurrence_id=1)
            with pytest.raises(AssertionError):
                tx.emit(EventType.OCCURRENCE_CLAIMED, occurrence_id=1)
            conn.rollback()
    finally:
        kernel.close()


def _requeue_params() -> dict[str, object]:
    return {"occ_id": 1, "expected_fence": None, "expected_error_code": None, "now": 0}
