"""Adapter adjudication: the ask, the adapter's verdict, and the operator's precedence (I6)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument, LeaseLost, StateConflict
from kernel.occurrences.adapter_verdicts import MAX_ASKS
from kernel.reports import Verdict
from kernel.states import Decision
from kernel.states import OccurrenceStatus as S
from kernel.store import Kernel

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

WINDOW = 20.0
APPLIED = Verdict(Decision.APPLIED, {"status": 200})
NOT_APPLIED = Verdict(Decision.NOT_APPLIED, {"status": 404})


def uncertain(k: Harness, job_id: str = "job") -> int:
    """An at-most-once occurrence whose lease expired mid-run: it needs adjudication."""
    claim = k.running(job_id, delivery="at-most-once", max_attempts=1)
    k.clock.advance(30)
    assert k.kernel.expire_leases()["needs_adjudication"] == 1
    return claim.occurrence.id


def due(k: Harness) -> list[int]:
    return [h.occurrence_id for h in k.kernel.adapter_asks_due(rehint_after=60)]


def test_the_adapter_applied_verdict_settles_it_with_its_evidence(k: Harness) -> None:
    occ_id = uncertain(k)
    assert due(k) == [occ_id]
    assert due(k) == [], "hinted: not again before rehint_after"
    asked = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
    assert asked is not None and asked.occurrence.status == S.NEEDS_ADJUDICATION
    assert asked.occurrence.payload == {"callable": "jobs.sample:run", "args": [], "kwargs": {}}
    assert k.kernel.ask_adapter(occ_id, asker="w3", window=WINDOW) is None, "one asker at a time"

    done = k.kernel.adapter_adjudicates(occ_id, token=asked.token, verdict=APPLIED)
    assert done.status == S.SUCCEEDED and done.settled_at is not None
    [event] = [
        e for e in k.kernel.events(occurrence_id=occ_id) if e.type == "occurrence_adjudicated"
    ]
    assert (event.fence, event.data) == (
        1,
        {
            "decision": "applied",
            "status": "succeeded",
            "authority": "adapter",
            "asker": "w2",
            "evidence": {"status": 200},
        },
    )
    assert k.event_types(occ_id)[-2:] == ["occurrence_adapter_asked", "occurrence_adjudicated"]
    verdict = k.kernel.last_adjudication(occ_id)
    assert verdict is not None and verdict.to_dict()["authority"] == "adapter"
    with pytest.raises(StateConflict):  # a second answer of the same ask moves nothing
        k.kernel.adapter_adjudicates(occ_id, token=asked.token, verdict=NOT_APPLIED)


def test_not_applied_makes_it_runnable_and_the_next_run_sees_the_verdict(k: Harness) -> None:
    occ_id = uncertain(k)
    asked = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
    assert asked is not None
    again = k.kernel.adapter_adjudicates(occ_id, token=asked.token, verdict=NOT_APPLIED)
    assert again.status == S.RETRY_WAIT
    # max_attempts is 1 and spent by the uncertain run: the adapter's evidence earns it back.
    claim = k.kernel.claim(occ_id, owner="w3", lease=30)
    assert claim is not None and (claim.fence, claim.occurrence.attempt) == (2, 1)
    verdict = k.kernel.last_adjudication(occ_id)
    assert verdict is not None
    assert (verdict.decision, verdict.authority, verdict.evidence, verdict.fence) == (
        Decision.NOT_APPLIED,
        "adapter",
        {"status": 404},
        1,
    )


def test_the_operator_verdict_is_what_the_next_run_sees(k: Harness) -> None:
    occ_id = uncertain(k)
    assert k.kernel.last_adjudication(occ_id) is None
    k.kernel.adjudicate(occ_id, decision="not_applied", request_id="adj-1", operator="ops")
    verdict = k.kernel.last_adjudication(occ_id)
    assert verdict is not None
    assert (verdict.decision, verdict.authority, verdict.evidence) == (
        Decision.NOT_APPLIED,
        "operator",
        {"operator": "ops", "request_id": "adj-1"},
    )
    assert due(k) == [], "decided: nobody asks"


def test_an_operator_verdict_first_refuses_the_adapter_answer(k: Harness) -> None:
    occ_id = uncertain(k)
    asked = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
    assert asked is not None
    k.kernel.adjudicate(occ_id, decision="abandon", request_id="adj-1", operator="ops")
    with pytest.raises(StateConflict) as refused:
        k.kernel.adapter_adjudicates(occ_id, token=asked.token, verdict=APPLIED)
    assert refused.value.code == "STATE_CONFLICT" and "decided before" in refused.value.message
    with pytest.raises(StateConflict):
        k.kernel.adapter_cannot_tell(occ_id, token=asked.token, reason="unknown")
    assert k.kernel.get_occurrence(occ_id).status == S.DEAD_LETTER


def test_an_expired_ask_is_asked_again_and_its_late_answer_refused(k: Harness) -> None:
    occ_id = uncertain(k)
    first = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
    assert first is not None
    k.clock.advance(WINDOW)
    with pytest.raises(LeaseLost):  # expired, not yet asked again
        k.kernel.adapter_adjudicates(occ_id, token=first.token, verdict=APPLIED)
    assert due(k) == [occ_id], "the crashed asker's question is asked again"
    second = k.kernel.ask_adapter(occ_id, asker="w3", window=WINDOW)
    assert second is not None and second.token != first.token
    with pytest.raises(LeaseLost) as refused:
        k.kernel.adapter_adjudicates(occ_id, token=first.token, verdict=APPLIED)
    assert refused.value.code == "LEASE_LOST"
    k.kernel.adapter_adjudicates(occ_id, token=second.token, verdict=APPLIED)
    asks = [e.data["ask"] for e in k.kernel.events(occurrence_id=occ_id) if "ask" in e.data]
    assert asks == [1, 2]


def test_after_max_asks_or_cannot_tell_only_the_operator_decides(k: Harness) -> None:
    crashed = uncertain(k, "crashed")
    for _ in range(MAX_ASKS):
        assert k.kernel.ask_adapter(crashed, asker="w2", window=WINDOW) is not None
        k.clock.advance(WINDOW)
    assert k.kernel.ask_adapter(crashed, asker="w2", window=WINDOW) is None
    unsure = uncertain(k, "unsure")
    asked = k.kernel.ask_adapter(unsure, asker="w2", window=WINDOW)
    assert asked is not None
    k.kernel.adapter_cannot_tell(unsure, token=asked.token, reason="lookup answered 503")
    assert k.event_types(unsure)[-1] == "occurrence_adapter_cannot_tell"
    assert k.kernel.events(occurrence_id=unsure)[-1].data == {"reason": "lookup answered 503"}
    k.clock.advance(WINDOW)
    assert k.kernel.ask_adapter(unsure, asker="w3", window=WINDOW) is None
    assert due(k) == []
    for occ_id in (crashed, unsure):
        assert k.kernel.get_occurrence(occ_id).status == S.NEEDS_ADJUDICATION
        k.kernel.adjudicate(occ_id, decision="applied", request_id=f"a{occ_id}", operator="ops")


def test_a_new_uncertain_run_is_asked_afresh(k: Harness) -> None:
    occ_id = uncertain(k)
    asked = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
    assert asked is not None
    k.kernel.adapter_cannot_tell(occ_id, token=asked.token, reason="no record")
    k.kernel.adjudicate(occ_id, decision="not_applied", request_id="adj-1", operator="ops")
    assert k.kernel.claim(occ_id, owner="w3", lease=30) is not None
    k.clock.advance(30)
    assert k.kernel.expire_leases()["needs_adjudication"] == 1
    assert due(k) == [occ_id]
    again = k.kernel.ask_adapter(occ_id, asker="w4", window=WINDOW)
    assert again is not None
    ask_events = [e for e in k.kernel.events(occurrence_id=occ_id) if e.type.endswith("_asked")]
    assert [(e.fence, e.data["ask"]) for e in ask_events] == [(1, 1), (2, 1)]


def test_the_adapter_may_not_abandon_nor_record_much_evidence(k: Harness) -> None:
    occ_id = uncertain(k)
    asked = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
    assert asked is not None
    for verdict in (
        Verdict(Decision.ABANDON, {}),
        Verdict(Decision.APPLIED, {"log": "x" * 5000}),
    ):
        with pytest.raises(InvalidArgument):
            k.kernel.adapter_adjudicates(occ_id, token=asked.token, verdict=verdict)
    assert k.kernel.get_occurrence(occ_id).status == S.NEEDS_ADJUDICATION


def race(adapter_side: Kernel, operator_side: Kernel, occ_id: int, token: str) -> dict[str, str]:
    """The adapter's answer and an operator's abandon, released together on two connections."""
    outcomes: dict[str, str] = {}
    start = threading.Barrier(2)

    def adapter() -> None:
        start.wait()
        try:
            done = adapter_side.adapter_adjudicates(occ_id, token=token, verdict=APPLIED)
            outcomes["adapter"] = done.status.value
        except StateConflict as exc:
            outcomes["adapter"] = exc.code

    def operator() -> None:
        start.wait()
        try:
            result = operator_side.adjudicate(
                occ_id, decision="abandon", request_id=f"race-{occ_id}", operator="ops"
            )
            outcomes["operator"] = result.occurrence.status.value
        except StateConflict as exc:
            outcomes["operator"] = exc.code

    threads = [threading.Thread(target=adapter), threading.Thread(target=operator)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return outcomes


def test_operator_and_adapter_racing_decide_once(k: Harness) -> None:
    """Both writers at once, on their own connections: exactly one verdict applies."""
    if k.backend != "postgres":
        pytest.skip("SQLite serialises writers; the race needs PostgreSQL")
    other = Kernel.open(k.url, clock=k.clock)
    try:
        for round_ in range(8):
            occ_id = uncertain(k, f"race-{round_}")
            asked = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
            assert asked is not None
            outcomes = race(k.kernel, other, occ_id, asked.token)
            assert sorted(outcomes.values()) in (
                ["STATE_CONFLICT", "succeeded"],
                ["STATE_CONFLICT", "dead_letter"],
            ), outcomes
            winner = next(side for side, what in outcomes.items() if what != "STATE_CONFLICT")
            decided = [
                e
                for e in k.kernel.events(occurrence_id=occ_id)
                if e.type == "occurrence_adjudicated"
            ]
            assert [e.data["authority"] for e in decided] == [winner]
            final = k.kernel.get_occurrence(occ_id).status
            assert final == (S.SUCCEEDED if winner == "adapter" else S.DEAD_LETTER)
    finally:
        other.close()


def _children(k: Harness, job_id: str) -> list[str]:
    return [o.status for o in k.kernel.list_occurrences(job_id=job_id, limit=10)]


@pytest.mark.parametrize("authority", ["operator", "adapter"])
def test_a_verdict_that_settles_fires_the_chained_children(k: Harness, authority: str) -> None:
    """applied settles succeeded and abandon dead_letter: the children chained on that
    outcome fire as after a holder's settle; not_applied settles nothing and fires none."""
    k.define("job", delivery="at-most-once", max_attempts=1)
    k.define("on-success", after={"job": "job", "on": "success"})
    k.define("on-failure", after={"job": "job", "on": "failure"})
    claims = [k.running("job") for _ in range(3)]
    k.clock.advance(30)
    assert k.kernel.expire_leases()["needs_adjudication"] == 3
    applied, abandoned, retried = (c.occurrence.id for c in claims)
    if authority == "adapter":
        for occ_id, verdict in ((applied, APPLIED), (retried, NOT_APPLIED)):
            asked = k.kernel.ask_adapter(occ_id, asker="w2", window=WINDOW)
            assert asked is not None
            k.kernel.adapter_adjudicates(occ_id, token=asked.token, verdict=verdict)
    else:
        k.kernel.adjudicate(applied, decision="applied", request_id="r1", operator="ops")
        k.kernel.adjudicate(retried, decision="not_applied", request_id="r3", operator="ops")
    # An adapter never abandons: that verdict is the operator's in both cases.
    k.kernel.adjudicate(abandoned, decision="abandon", request_id="r2", operator="ops")
    assert _children(k, "on-success") == ["queued"]
    assert _children(k, "on-failure") == ["queued"]
