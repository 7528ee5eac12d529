"""Found by the chaos run (freeze_worker): a thawed worker's run writes after its lease was taken.

The chaos ledger showed it: a 6-step ``long-alo`` run on a worker frozen (SIGSTOP) past
its 5 s lease wrote its next step right after SIGCONT, while the reclaiming run (fence 2)
on another host was under way; only then did the lease keeper's renewal learn
``LEASE_LOST`` and set ``ctx.cancelled``. The job checks ``ctx.cancelled`` before every
effect, so nothing told it in time: SPEC I11 (effects stay inside the lease) is broken for
in-process adapters. Fixed in ``celery_app/runtime.py``: the run's ``cancelled`` reads
the self-fencing deadline itself, so a thawed run sees it before its keeper thread runs.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from integration.stack import Stack
from multihost.evidence import read_ledger

MULTIHOST_DIR = Path(__file__).resolve().parent


def test_thawed_worker_writes_nothing_after_its_lease_was_reclaimed(
    tmp_path: Path, redis_url: str
) -> None:
    stack = Stack(tmp_path, broker_url=redis_url, database_url=None)
    ledger = tmp_path / "chaos-ledger.jsonl"
    stack.env["PYTHONPATH"] += os.pathsep + str(MULTIHOST_DIR)
    kwargs = {"ledger": str(ledger), "total": 8, "step_s": 1.0}
    stack.use_jobs(
        {
            "id": "long",
            "kind": "callable",
            "queue": stack.queue,
            "schedule": None,
            "lease": "5s",
            "max_attempts": 5,
            "payload": {"callable": "chaos_jobs:long_steps", "kwargs": kwargs},
        }
    )

    def fences() -> list[int]:
        return [line["fence"] for line in read_ledger(ledger)]

    try:
        frozen = stack.start_worker("frozen")
        stack.start_beat("beat")
        occurrence_id = stack.run_now("long")
        stack.wait(lambda: len(fences()) >= 2, timeout=30, what="the first step")
        frozen.signal_tree(signal.SIGSTOP)
        stack.start_worker("reclaimer")
        stack.wait(lambda: 2 in fences(), timeout=40, what="the reclaim under fence 2")
        frozen.signal_tree(signal.SIGCONT)
        stack.wait(
            lambda: stack.occurrence(occurrence_id).status.value == "succeeded",
            timeout=40,
            what="the reclaimed run",
        )
        written = fences()
        stale = [fence for fence in written[written.index(2) :] if fence == 1]
        assert stale == [], f"fence 1 wrote {len(stale)} line(s) after fence 2 started"
    finally:
        stack.close()
