"""The plans PostgreSQL caches for the kernel's repeated writes never scan history.

psycopg prepares a statement it has sent five times, and PostgreSQL then plans it once for
any parameters (a generic plan) from the statistics it had when it planned: on a table that
grew faster than its statistics, that plan may read the whole table where a custom plan
would seek. test_history_plans.py asks whether an index *can* serve each reader; this asks
which plan the server actually ran for the writes callers, workers and Beat repeat, each of
the rows it names, as the table grows under them: ``auto_explain`` reports each executed
plan to the connection that ran it, and no plan may hold a ``Seq Scan`` of ``occurrences``
or ``events``. Reads of live work (the pump's, ``claim_next``, ``status``, the watchdog) are
left to test_history_plans.py: here live work is most of the table, and reading all of it
is their cheapest plan, as PostgreSQL rightly picks once its statistics say so.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa

from kernel import EnqueueRequest, Kernel
from tests.kernel.conftest import Harness

_SCAN = re.compile(r"Seq Scan on (occurrences|events)\b")


def _explained(kernel: Kernel) -> list[str]:
    """Every plan the kernel's connections execute from now on, as ``auto_explain`` tells
    them (a superuser's ``LOAD``: the test server's)."""
    plans: list[str] = []

    def explain(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.add_notice_handler(lambda notice: plans.append(notice.message_primary))
        with dbapi_connection.cursor() as cursor:
            cursor.execute("LOAD 'auto_explain'")
            cursor.execute("SET auto_explain.log_min_duration = 0")
            cursor.execute("SET auto_explain.log_level = notice")
        dbapi_connection.commit()

    sa.event.listen(kernel.engine, "connect", explain)
    kernel.engine.dispose()  # the pool's connections were opened without it
    return plans


def test_repeated_writes_run_no_plan_that_scans_history(k: Harness) -> None:
    if k.backend != "postgres":
        pytest.skip("PostgreSQL's cached plans; SQLite plans each statement as it is sent")
    kernel = k.kernel
    plans = _explained(kernel)
    made = []
    for batch in range(12):  # ~6,000 rows: past the statistics of the first plans
        made += kernel.enqueue_many([EnqueueRequest("t.plain", [i]) for i in range(500)])
        made += kernel.enqueue_many([EnqueueRequest("t.keyed", [i], key=f"{batch}-{i}")
                                     for i in range(20)])  # fmt: skip
        made.append(kernel.enqueue(task="t.single", args=[batch]))
        made.append(kernel.enqueue(task="t.single", key=f"single-{batch}"))
    for run in made[:40]:  # a worker's calls
        claim = kernel.claim(run.occurrence_id, owner="w", lease=60)
        assert claim is not None
        kernel.renew(run.occurrence_id, owner="w", fence=claim.fence, lease=60, checkpoint=[1])
        if run.occurrence_id % 2:
            kernel.succeed(run.occurrence_id, owner="w", fence=claim.fence)
        else:
            kernel.fail(run.occurrence_id, owner="w", fence=claim.fence, code="X", message="x")
    for run, after in zip(made[40:50], made[50:60], strict=True):  # a batched hint's runs
        claim = kernel.claim(run.occurrence_id, owner="w", lease=60)
        assert claim is not None
        kernel.succeed_and_claim(run.occurrence_id, owner="w", fence=claim.fence,
                                 next_occurrence_id=after.occurrence_id)  # fmt: skip
    for i, run in enumerate(made[60:70]):  # an operator's pause, ack and resume; a cancel
        claim = kernel.claim(run.occurrence_id, owner="w", lease=60)
        assert claim is not None
        point = "adapter_checkpoint"
        asked = kernel.request_pause(
            run.occurrence_id, expected_fence=claim.fence, request_id=f"p{i}",
            safe_points=[point], operator="o",
        )  # fmt: skip
        assert asked.occurrence.control is not None
        kernel.ack_pause(
            run.occurrence_id, owner="w", fence=claim.fence, request_id=f"p{i}",
            expected_revision=asked.occurrence.control.revision, safe_point=point,
            checkpoint={"at": i},
        )  # fmt: skip
        kernel.resume(run.occurrence_id, request_id=f"r{i}", operator="o")
        kernel.cancel(made[-1 - i].occurrence_id, request_id=f"c{i}", operator="o")
    for i in range(8):  # a chord of two and a chain step, made by their settles
        body = {"task": "t.body", "options": {"task_id": f"body-{i}"}}
        step = {"task": "t.next", "options": {"task_id": f"next-{i}"}}
        members = kernel.enqueue_many(
            [EnqueueRequest("t.member", [n], key=f"m{i}-{n}") for n in range(2)],
            chord={"id": f"chord-{i}", "body": body},
        )
        chained = kernel.enqueue(task="t.first", key=f"first-{i}", callbacks=[step])
        for run in [*members, chained]:
            claim = kernel.claim(run.occurrence_id, owner="w", lease=60)
            assert claim is not None
            kernel.succeed(run.occurrence_id, owner="w", fence=claim.fence, result=i)
    for made_by in ("t.body", "t.next"):  # each settle made what it links
        assert len(kernel.list_occurrences(job_id=f"task:{made_by}", limit=20)) == 8
    k.define("cron")
    for _ in range(10):  # Beat's ticks: firings and the upkeep of what is due
        k.fire("cron", 1)
        kernel.due_jobs()
        kernel.record_beat("beat-1", host="h", interval=5)
        kernel.forget_silent_beats(silent_for=3600)
        kernel.expire_leases()
        kernel.skip_expired()
        kernel.judge_fan_ins()
        kernel.apply_approval_timeouts()
        kernel.reconcile_pools()
        kernel.adapter_asks_due()
        kernel.due_notifications()
        k.clock.advance(120)
    for _ in range(6):
        kernel.apply_retention({"succeeded": 60, "cancelled": 60}, limit=5)
    assert len(plans) > 100, plans[:3]  # auto_explain told of every statement
    scans = [plan for plan in plans if _SCAN.search(plan)]
    assert not scans, f"{len(scans)} of {len(plans)} plans scan history; the first:\n{scans[0]}"
