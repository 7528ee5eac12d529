"""Found by the chaos run: a renewal in flight when its run ends says "lease lost" and may kill.

The worker logs showed a pool process warn ``lease lost; the run is stopped`` for an
occurrence it had already settled, and, after a partition, one whose run had already
stopped (fenced off) exit 70 ("did not stop within kill_grace") once the renewal that
hung through the partition returned ``LEASE_LOST``: the keeper treated a run that had
ended as one still to stop. Fixed in ``celery_app/runtime.py``: the run is marked
finished before its end waits for the renewal in flight, and a renewal answered
``LEASE_LOST`` for a finished run stops nothing.

The interleaving is made exact with a kernel whose ``renew`` waits, once it is in
flight, until the run has settled (everything else is the real kernel and runtime).
"""

from __future__ import annotations

import logging
import threading
import uuid
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from adapters.callable import CallableAdapter
from celery_app.held_run import LeaseKeeper
from celery_app.runtime import run_occurrence
from kernel import Kernel, RenewAnswer
from kernel.facade.workers import WorkerLane

RENEWING = threading.Event()
SETTLED = threading.Event()


class SettleOvertakesRenewal(Kernel):
    """The real kernel, with each renewal held in flight until the run has settled."""

    def renew(
        self, occurrence_id: int, *, owner: str, fence: int, lease: float, checkpoint: Any = None
    ) -> RenewAnswer:
        RENEWING.set()
        SETTLED.wait(30)
        return super().renew(
            occurrence_id, owner=owner, fence=fence, lease=lease, checkpoint=checkpoint
        )

    @cached_property
    def worker_lane(self) -> WorkerLane:
        return SettlingLane(self)


class SettlingLane(WorkerLane):
    """The runtime's success, telling the held renewal once it has settled."""

    def succeed(self, occurrence_id: int, *, owner: str, fence: int, result: Any = None) -> None:
        super().succeed(occurrence_id, owner=owner, fence=fence, result=result)
        SETTLED.set()


def finish_once_renewing() -> str:
    """The job: it ends while its lease renewal is in flight."""
    assert RENEWING.wait(30), "no renewal started"
    return "done"


@pytest.mark.timeout(60)
def test_a_renewal_answered_after_the_run_settled_stops_and_logs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    RENEWING.clear()
    SETTLED.clear()
    kernel = SettleOvertakesRenewal.open(f"sqlite:///{tmp_path / 'k.db'}", migrate_schema=True)
    try:
        kernel.apply_job(
            {
                "id": "settles-while-renewing",
                "kind": "callable",
                "queue": "q",
                "schedule": None,
                "lease": "5s",
                "payload": {"callable": f"{__name__}:finish_once_renewing"},
            }
        )
        occurrence = kernel.run_now(
            "settles-while-renewing", request_id=uuid.uuid4().hex, operator="test"
        ).occurrence
        keeper = LeaseKeeper()
        with caplog.at_level(logging.INFO, logger="celery_kernel.runtime"):
            outcome = run_occurrence(
                kernel, {"callable": CallableAdapter()}, occurrence.id, main_pid=0, keeper=keeper
            )
        assert outcome.result == "succeeded"
        assert kernel.get_occurrence(occurrence.id).status.value == "succeeded"
        lost = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage().lower()]
        assert lost == [], f"a settled run's late renewal was reported: {lost}"
    finally:
        kernel.close()
