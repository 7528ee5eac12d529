"""Revision 0002 upgrades a 0001 database holding data, repairs what 0001 could strand,
and from then on the schema refuses impossible states (SQLite batch mode and PostgreSQL)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from kernel.errors import StateConflict
from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.migrating import A_JOB, AN_OCCURRENCE, revisions


def _row(occ_id: int, status: str, **values: object) -> dict[str, object]:
    return {
        "id": occ_id,
        "key": f"t{occ_id}",
        "status": status,
        "owner": None,
        "until": None,
        "cancel": False,
        "settled": None,
        **values,
    }


def _upgrade_0001(url: str) -> None:
    with revisions(url) as db:
        db.upgrade("0001")
        db.conn.execute(A_JOB)
        db.conn.execute(
            AN_OCCURRENCE,
            [
                _row(1, "running", owner="w", until=10**13),
                # What 0001's settle could leave when a cancel raced a retry.
                _row(2, "retry_wait", cancel=True),
                _row(3, "succeeded", settled=5),
            ],
        )


def test_upgrade_from_0001_keeps_data_and_repairs_stranded_cancels(kernel_url: str) -> None:
    _upgrade_0001(kernel_url)
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        assert kernel.get_occurrence(1).status == "running"
        assert kernel.get_occurrence(1).lease_owner == "w"
        stranded = kernel.get_occurrence(2)
        assert stranded.status == "cancelled" and stranded.settled_at is not None
        assert kernel.get_occurrence(3).status == "succeeded"
        with kernel.engine.begin() as conn, pytest.raises(sa.exc.IntegrityError):
            conn.execute(sa.text("UPDATE occurrences SET lease_owner = 'x' WHERE id = 3"))
    finally:
        kernel.close()


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE occurrences SET status = 'queued', settled_at = NULL, cancel_requested = true",
        "UPDATE occurrences SET status = 'running', lease_owner = NULL",
        "UPDATE occurrences SET settled_at = NULL",
        "UPDATE occurrences SET status = 'lost'",
    ],
)
def test_the_schema_refuses_impossible_states_with_a_kernel_error(
    kernel_url: str, change: str
) -> None:
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        kernel.define_job({"id": "j", "kind": "callable", "payload": {"callable": "a:b"}})
        occ = kernel.run_now("j", request_id="r", operator="t", force=True).occurrence
        kernel.cancel(occ.id, request_id="c", operator="t")

        def write(tx: object) -> None:
            tx.conn.execute(sa.text(change + f" WHERE id = {occ.id}"))  # type: ignore[attr-defined]

        with pytest.raises(StateConflict) as refused:
            kernel._session.run(write)
        assert refused.value.details["constraint"]
    finally:
        kernel.close()
