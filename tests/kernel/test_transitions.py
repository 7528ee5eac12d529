"""The transition table names statements that exist, and only known states and events."""

from __future__ import annotations

from kernel import statements as st
from kernel.firing import create_occurrence
from kernel.states import ControlState, OccurrenceStatus
from kernel.transitions import CONTROL_TRANSITIONS, OCCURRENCE_TRANSITIONS, allowed_pairs


def test_every_row_names_a_statement_of_the_kernel() -> None:
    for row in (*OCCURRENCE_TRANSITIONS, *CONTROL_TRANSITIONS):
        assert row.statement in st.__all__ or row.statement == create_occurrence.__name__, row


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
