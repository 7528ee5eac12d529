"""A worker asks the http adapter about an uncertain at-most-once run before an operator is.

The remote side is an HTTP server on 127.0.0.1 in this test process: it records each
request, holds the run's POST until the test ends (the worker is frozen meanwhile, so
its 5 s lease expires mid-request) and answers the lookup by Idempotency-Key.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from integration.remote import Remote, remote
from integration.stack import Stack, ended

from adapters.base import Adapter, AdjudicationContext, ExecutionContext
from adapters.callable import CallableAdapter
from celery_app.adjudication import ask_adapter
from celery_app.held_run import LeaseKeeper
from celery_app.runtime import run_occurrence
from kernel import Decision, Kernel, Verdict
from kernel.testing import ManualClock

__all__ = ["remote"]  # fixtures


def charge(stack: Stack, remote: Remote, job_id: str, lookup_status: int) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "http",
        "queue": stack.queue,
        "delivery": "at-most-once",
        "lease": "5s",
        "max_attempts": 1,
        "payload": {
            "url": f"{remote.url}/charge",
            "json": {"amount": 5},
            "lookup": {"url": f"{remote.url}/lookup/{lookup_status}"},
        },
    }


def adjudications(stack: Stack, occ_id: int) -> list[dict[str, Any]]:
    events = stack.kernel.events(occurrence_id=occ_id, limit=1000)
    return [e.data for e in events if e.type == "occurrence_adjudicated"]


# Redis, not the filesystem broker: a process frozen while it holds a queue file's lock
# would stall every other consumer of that folder.
@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_the_adapter_settles_what_it_can_tell_and_leaves_the_rest(
    stack: Stack, remote: Remote
) -> None:
    stack.use_jobs(charge(stack, remote, "told", 200), charge(stack, remote, "unsure", 503))
    frozen = stack.start_worker("frozen", concurrency=2)
    stack.start_beat("beat")
    told, unsure = stack.run_now("told"), stack.run_now("unsure")
    stack.wait(lambda: len(remote.seen("POST", "/charge")) == 2, timeout=30, what="both POSTs")
    pool = frozen.signal_tree(signal.SIGSTOP)[1:]
    assert len(pool) >= 2, "the pool children were not frozen"
    asker = stack.start_worker("asker")

    stack.wait(lambda: stack.occurrence(told).status.value == "succeeded", timeout=40, what="told")
    stack.wait(
        lambda: "occurrence_adapter_cannot_tell" in [t for t, _ in stack.event_types(unsure)],
        timeout=30,
        what="unsure: the adapter could not tell",
    )
    # Each lookup asked by the occurrence's own Idempotency-Key, once.
    assert sorted(remote.seen("GET", "/lookup/")) == sorted([str(told), str(unsure)])
    [decided] = adjudications(stack, told)
    assert decided["authority"] == "adapter" and decided["decision"] == "applied"
    assert decided["evidence"] == {"lookup": f"GET {remote.url}/lookup/200", "status": 200}
    assert asker.logged("the adapter decided applied")
    # No operator was asked for it; the other waits for one.
    assert stack.occurrence(unsure).status.value == "needs_adjudication"
    assert adjudications(stack, unsure) == []
    answer = stack.cli("adjudicate", str(unsure), "--decision", "abandon")
    assert answer["occurrence"]["status"] == "dead_letter"
    assert [d["authority"] for d in adjudications(stack, unsure)] == ["operator"]
    # The frozen pool processes' kill timers ended them during the freeze, mid-request,
    # before their leases could expire: the POSTs' answers reach no one.
    assert [pid for pid in pool if not ended(pid)] == []
    frozen.signal_tree(signal.SIGCONT)
    remote.release.set()
    assert [e for e in stack.event_types(told) if e[0] == "occurrence_succeeded"] == []


def verdict_seen(ctx: ExecutionContext) -> dict[str, Any] | None:
    """A callable job answering what its run saw of the earlier verdict."""
    return None if ctx.adjudication is None else ctx.adjudication.to_dict()


class Ledgered(CallableAdapter):
    """A callable adapter that looks its runs up in a ledger: none found (not_applied); the
    job ``raises`` finds the ledger offline."""

    def adjudicate(self, ctx: AdjudicationContext) -> Verdict | None:
        if ctx.occurrence.job_id == "raises":
            raise RuntimeError("ledger offline")
        return Verdict(Decision.NOT_APPLIED, {"ledger": "no entry"})


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[tuple[Kernel, ManualClock]]:
    clock = ManualClock()
    opened = Kernel.open(f"sqlite:///{tmp_path / 'k.db'}", migrate_schema=True, clock=clock)
    yield opened, clock
    opened.close()


def uncertain(kernel: Kernel, clock: ManualClock, job_id: str) -> int:
    """An occurrence of a new at-most-once ``verdict_seen`` job whose run's lease expired."""
    kernel.define_job(
        {
            "id": job_id,
            "kind": "callable",
            "payload": {"callable": "integration.test_adjudication:verdict_seen"},
            "delivery": "at-most-once",
            "max_attempts": 1,
        }
    )
    occ_id = kernel.run_now(job_id, request_id=job_id, operator="ops").occurrence.id
    assert kernel.claim(occ_id, owner="gone", lease=30) is not None
    clock.advance(30)
    assert kernel.expire_leases()["needs_adjudication"] == 1
    return occ_id


def seen_by_next_run(kernel: Kernel, adapters: dict[str, Adapter], occ_id: int) -> Any:
    outcome = run_occurrence(kernel, adapters, occ_id, main_pid=0, keeper=LeaseKeeper())
    assert outcome.result == "succeeded"
    seen = kernel.get_occurrence(occ_id).result
    return {k: seen[k] for k in ("decision", "authority", "evidence", "fence")}


def reasons(kernel: Kernel, occ_id: int) -> list[str]:
    events = kernel.events(occurrence_id=occ_id)
    return [e.data["reason"] for e in events if e.type == "occurrence_adapter_cannot_tell"]


def test_the_run_after_an_operator_verdict_sees_it(kernel: tuple[Kernel, ManualClock]) -> None:
    """In-process: the worker's ask (an adapter without a hook), the operator's verdict,
    and the next run's ``ctx.adjudication``."""
    k, clock = kernel
    adapters: dict[str, Adapter] = {"callable": CallableAdapter()}
    occ_id = uncertain(k, clock, "seen")
    assert ask_adapter(k, adapters, occ_id, "shell") == "no_adapter"
    assert ask_adapter(k, adapters, occ_id, "callable") == "cannot_tell"
    assert ask_adapter(k, adapters, occ_id, "callable") == "not_asked"
    assert reasons(k, occ_id) == [
        "the callable adapter cannot answer unknown outcomes (no adjudicate hook)"
    ]
    k.adjudicate(occ_id, decision="not_applied", request_id="a1", operator="ops")
    assert seen_by_next_run(k, adapters, occ_id) == {
        "decision": "not_applied",
        "authority": "operator",
        "evidence": {"operator": "ops", "request_id": "a1"},
        "fence": 1,
    }


def test_the_run_after_an_adapter_verdict_sees_it(kernel: tuple[Kernel, ManualClock]) -> None:
    k, clock = kernel
    adapters: dict[str, Adapter] = {"callable": Ledgered()}
    told, raises = uncertain(k, clock, "told"), uncertain(k, clock, "raises")
    assert ask_adapter(k, adapters, raises, "callable") == "cannot_tell"
    assert reasons(k, raises) == ["the callable adapter failed: RuntimeError: ledger offline"]
    assert ask_adapter(k, adapters, told, "callable") == "decided"
    assert seen_by_next_run(k, adapters, told) == {
        "decision": "not_applied",
        "authority": "adapter",
        "evidence": {"ledger": "no entry"},
        "fence": 1,
    }
