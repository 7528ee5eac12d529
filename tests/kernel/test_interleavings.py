"""Two writers on one occurrence at the same instant, round after round (issue 8).

Each round stages a fresh occurrence, then two actors (threads, each with its own Kernel
and connections) act on it at once (:mod:`interleave`). Every other round on PostgreSQL
holds the occurrence's row lock until both have made their reads, so both write from the
same reading. Whatever the order, the result must be one a serial order gives: an accepted
cancel ends ``cancelled`` (at the latest after the holder's or Beat's next write), exactly
one claimer wins, every refusal is a KernelError with a code, and the occurrence is left
where some actor can still move it, with an event log that names its state.

``KERNEL_RACE_ROUNDS`` sets the rounds per test. The defaults keep the suite's time budget:
100 on PostgreSQL for the races issue 8 names, 40 for the rest, 5 on SQLite (whose writers
are serial, so the rounds there only prove the same answers). A held round makes the window
certain (cancel vs retryable failure lost 100 of 100 held rounds on the base kernel, 56 of
100 free ones), so few rounds already prove a race; ``KERNEL_RACE_ROUNDS=300`` is the
few-hundred-round run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel.store import Kernel
from kernel.types import Claim
from tests.kernel.interleave import LEASE_S, SAFE_POINTS, Outcome, Stage, counter_problems
from tests.kernel.race_world import World, world, world_factory

pytestmark = pytest.mark.long

#: The race fixtures this module's tests take (imported, so listed as used).
__all__ = ["world", "world_factory"]


def _held(claim: Claim) -> dict[str, Any]:
    """The (owner, fence) keywords of the holder's writes."""
    return {"owner": claim.owner, "fence": claim.fence}


def _by_holder(worker: Outcome, retry: Callable[[], Any]) -> None:
    """A holder refused for anything but a lost lease writes once more, as a worker would."""
    if worker.refusal is not None and worker.code != "LEASE_LOST":
        retry()


# -- an accepted cancel always ends cancelled ----------------------------------------------


def _holder_write(stage: Stage, write: str, i: int) -> tuple[int, Callable[[Kernel], Any]]:
    """A running occurrence and its holder's ``write``: a retryable failure, a warm-shutdown
    hand back, or the acknowledgement of a pause requested of it."""
    pause_rid = None
    if write == "pause_ack":
        claim, pause_rid = stage.pause_pending()
    else:
        claim = stage.running()
    occ, owner, fence = claim.occurrence.id, claim.owner, claim.fence
    point, checkpoint = SAFE_POINTS[0], {"i": i}
    if write == "retryable_failure":
        return occ, lambda k: k.fail(
            occ, owner=owner, fence=fence, code="BOOM", message="retry me", retryable=True
        )
    if write == "hand_back":
        return occ, lambda k: k.hand_back(
            occ, owner=owner, fence=fence, safe_point=point, checkpoint=checkpoint
        )
    assert write == "pause_ack" and pause_rid is not None
    return occ, lambda k: k.ack_pause(
        occ,
        owner=owner,
        fence=fence,
        request_id=pause_rid,
        expected_revision=None,
        safe_point=point,
        checkpoint=checkpoint,
    )


@pytest.mark.parametrize("write", ["retryable_failure", "hand_back", "pause_ack"])
def test_cancel_vs_holder_write(world: World, write: str) -> None:
    """Either order ends cancelled: the holder's write sees the cancel and settles it, or the
    cancel finds the occurrence waiting (retry_wait, handed back, paused) and cancels it."""

    def round_(i: int) -> None:
        occ, holder = _holder_write(world.stage, write, i)
        rid = world.stage.next_id("cancel")
        written, cancelled = world.race(
            i, holder, lambda k: k.cancel(occ, request_id=rid, operator="op"), hold=occ
        )
        _by_holder(written, lambda: holder(world.stage.kernel))
        assert cancelled.ok, f"round {i}: cancel refused: {cancelled}"
        state = world.state(occ)
        status, control = state["occurrence"]["status"], state["control"]
        assert status == "cancelled", f"round {i}: {write} {written}, cancel {cancelled}"
        assert control is None or control["state"] == "terminal", f"round {i}: {control}"

    world.repeat(round_)


def test_cancel_vs_retry_with_new_arguments(world: World) -> None:
    """A task's retry with new arguments (Celery's ``retry(args=...)``) racing a cancel ends
    cancelled either way, and the arguments are stored exactly when the settle decided the
    retry (its retry_wait event), never by a settle the cancel turned into cancelled."""

    def round_(i: int) -> None:
        kernel = world.stage.kernel
        occ = kernel.enqueue(task="race.add", args=[i], settings={"max_attempts": 3}).occurrence_id
        claim = kernel.claim(occ, owner="w1", lease=LEASE_S)
        assert claim is not None
        new = {"args": [i, "new"], "kwargs": {}}

        def holder(k: Kernel) -> Any:
            return k.fail(occ, **_held(claim), code="TASK_RETRY", message="retry",
                          retry_in=0, retry_with=new)  # fmt: skip

        rid = world.stage.next_id("cancel")
        written, cancelled = world.race(
            i, holder, lambda k: k.cancel(occ, request_id=rid, operator="op"), hold=occ
        )
        _by_holder(written, lambda: holder(kernel))
        assert cancelled.ok, f"round {i}: cancel refused: {cancelled}"
        assert world.status(occ) == "cancelled", f"round {i}: retry {written}"
        retried = any(e.type == "occurrence_retry_wait" for e in kernel.events(occurrence_id=occ))
        stored = kernel.get_occurrence(occ).payload["args"] == new["args"]
        assert retried == stored, f"round {i}: retry_wait {retried}, new arguments {stored}"

    world.repeat(round_, rounds=40)


def test_cancel_vs_renew(world: World) -> None:
    """The holder learns of the cancel by its next renewal at the latest, and stops."""

    def round_(i: int) -> None:
        claim, rid = world.stage.running(), world.stage.next_id("cancel")
        occ, held = claim.occurrence.id, _held(claim)
        renewed, cancelled = world.race(
            i,
            lambda k: k.renew(occ, **held, lease=LEASE_S),
            lambda k: k.cancel(occ, request_id=rid, operator="op"),
            hold=occ,
        )
        assert renewed.ok and cancelled.ok, f"round {i}: renew {renewed}, cancel {cancelled}"
        assert world.stage.kernel.renew(occ, **held, lease=LEASE_S).cancel_requested
        world.stage.kernel.cancelled(occ, **held)
        assert world.status(occ) == "cancelled"

    world.repeat(round_, rounds=40)


def test_cancel_vs_claim(world: World) -> None:
    """Cancel first: nothing claims it. Claim first: the holder is asked and stops.

    Found by the concurrent lifecycle walk (test_lifecycle_concurrent.py).
    """

    def round_(i: int) -> None:
        (occ,), rid = world.stage.fresh(), world.stage.next_id("cancel")
        claimed, cancelled = world.race(
            i,
            lambda k: k.claim(occ, owner="w1", lease=LEASE_S),
            lambda k: k.cancel(occ, request_id=rid, operator="op"),
            hold=occ,
        )
        assert cancelled.ok, f"round {i}: cancel refused: {cancelled}"
        if claimed.ok and claimed.value is not None:
            answer = world.stage.kernel.renew(occ, owner="w1", fence=1, lease=LEASE_S)
            assert answer.cancel_requested, f"round {i}: claimed, the cancel was lost"
            world.stage.kernel.cancelled(occ, owner="w1", fence=1)
        assert world.status(occ) == "cancelled", f"round {i}: claim {claimed}"

    world.repeat(round_)


@pytest.mark.parametrize("job_id", ["amo", "once", "alo"])
def test_cancel_vs_lease_expiry(world: World, job_id: str) -> None:
    """A cancel racing Beat's lease expiry ends cancelled by that or Beat's next expiry,
    unless expiry settled it first (then the cancel is refused, STATE_CONFLICT)."""

    def round_(i: int) -> None:
        claim, rid = world.stage.running(job_id), world.stage.next_id("cancel")
        occ = claim.occurrence.id
        world.clock.advance(LEASE_S + 1)
        expired, cancelled = world.race(
            i,
            lambda k: k.expire_leases(),
            lambda k: k.cancel(occ, request_id=rid, operator="op"),
            hold=occ,
        )
        assert expired.ok, f"round {i}: expiry refused: {expired}"
        world.stage.kernel.expire_leases()  # Beat's next tick
        status = world.status(occ)
        if cancelled.ok:
            assert status == "cancelled", f"round {i}: cancel accepted, yet {status}"
        else:
            assert cancelled.code == "STATE_CONFLICT", f"round {i}: {cancelled}"
            assert status in ("needs_adjudication", "dead_letter"), f"round {i}: {status}"
        if status == "needs_adjudication":  # an unresolved run holds back the job's next one
            rid = world.stage.next_id("adjudicate")
            world.stage.kernel.adjudicate(occ, decision="abandon", request_id=rid, operator="op")

    world.repeat(round_, rounds=40)


# -- worker against operator -----------------------------------------------------------------


def test_pause_request_vs_hand_back(world: World) -> None:
    """Pause first: the hand back honours it (paused). Hand back first: the pause is refused.

    Odd rounds start from a run that was handed back and claimed again, so the control
    row exists (an UPDATE race); even rounds from none (an INSERT race).
    """

    def round_(i: int) -> None:
        claim = world.stage.running()
        if i % 4 >= 2:
            world.stage.kernel.hand_back(
                claim.occurrence.id,
                owner=claim.owner,
                fence=claim.fence,
                safe_point=SAFE_POINTS[0],
                checkpoint=0,
            )
            reclaimed = world.stage.kernel.claim(claim.occurrence.id, owner="w2", lease=LEASE_S)
            assert reclaimed is not None
            claim = reclaimed
        occ, held = claim.occurrence.id, _held(claim)
        rid = world.stage.next_id("pause")

        def hand_back(k: Kernel) -> None:
            k.hand_back(occ, **held, safe_point=SAFE_POINTS[0], checkpoint={"i": i})

        handed, paused = world.race(
            i,
            hand_back,
            lambda k: k.request_pause(
                occ,
                expected_fence=claim.fence,
                request_id=rid,
                safe_points=SAFE_POINTS,
                operator="op",
            ),
            hold=occ,
        )
        _by_holder(handed, lambda: hand_back(world.stage.kernel))
        state = world.state(occ)
        control = state["control"]["state"]
        assert state["occurrence"]["status"] == "retry_wait", f"round {i}: {handed}, {paused}"
        if paused.ok:
            assert control == "paused", f"round {i}: pause accepted, control {control}"
        else:
            assert paused.code == "STATE_CONFLICT", f"round {i}: {paused}"
            assert control == "resumed", f"round {i}: pause refused, control {control}"

    world.repeat(round_)


def test_pause_request_vs_success(world: World) -> None:
    """Pause first: the success (one statement when nothing else is owed) ends the pause
    it was asked for, with its event. Success first: the pause is refused. Never a pause
    left pending on a settled run (on PostgreSQL, held rounds make the success wait
    behind the request and re-check the row it committed)."""

    def round_(i: int) -> None:
        claim = world.stage.running()
        occ, held = claim.occurrence.id, _held(claim)
        rid = world.stage.next_id("pause")
        done, paused = world.race(
            i,
            lambda k: k.succeed(occ, **held),
            lambda k: k.request_pause(
                occ,
                expected_fence=claim.fence,
                request_id=rid,
                safe_points=SAFE_POINTS,
                operator="op",
            ),
            hold=occ,
        )
        assert done.ok, f"round {i}: success refused: {done}"
        state = world.state(occ)
        control = state["control"]
        assert state["occurrence"]["status"] == "succeeded", f"round {i}: {paused}"
        if paused.ok:
            assert control is not None and control["state"] == "terminal", f"round {i}: {control}"
            ended = [e for e in state["events"] if e[0] == "control_terminal"]
            assert len(ended) == 1, f"round {i}: {state['events']}"
        else:
            assert paused.code == "STATE_CONFLICT", f"round {i}: {paused}"
            assert control is None, f"round {i}: pause refused, control {control}"

    world.repeat(round_)


# -- one request id used twice at once -------------------------------------------------------

#: The event the first call of each operator action appends (cancel: of a queued occurrence).
ACTION_EVENT = {
    "pause": "occurrence_pause_requested",
    "resume": "occurrence_resumed",
    "requeue": "occurrence_requeued",
    "adjudicate": "occurrence_adjudicated",
    "cancel": "occurrence_cancelled",
    "run_now": "job_run_now",
}


def _stage_for(stage: Stage, action: str, i: int) -> tuple[int | None, str]:
    """An occurrence ``action`` applies to (claimed once: fence 1), and the event it appends.

    Cancel alternates a running occurrence (odd rounds) and a queued one; run_now needs none.
    """
    if action == "run_now":
        return None, ACTION_EVENT[action]
    if action == "cancel" and i % 2:
        return stage.running().occurrence.id, "occurrence_cancel_requested"
    staged = {
        "pause": lambda: stage.running().occurrence.id,
        "resume": lambda: stage.paused().occurrence.id,
        "requeue": lambda: stage.dead_letter().occurrence.id,
        "adjudicate": lambda: stage.awaiting_adjudication().occurrence.id,
        "cancel": lambda: stage.fresh()[0],
    }[action]()
    return staged, ACTION_EVENT[action]


def _operator_call(action: str, occ: int | None, rid: str, i: int) -> Callable[[Kernel], Any]:
    """``action`` on what :func:`_stage_for` staged, under request id ``rid``."""
    if action == "run_now":
        return lambda k: k.run_now("alo", request_id=rid, operator="op", force=True)
    assert occ is not None
    if action == "pause":
        return lambda k: k.request_pause(
            occ, expected_fence=1, request_id=rid, safe_points=SAFE_POINTS, operator="op"
        )
    if action == "requeue":
        return lambda k: k.requeue(
            occ, expected_fence=1, expected_error_code="FATAL", request_id=rid, operator="op"
        )
    if action == "adjudicate":
        decision = ("applied", "not_applied", "abandon")[i % 3]
        return lambda k: k.adjudicate(occ, decision=decision, request_id=rid, operator="op")
    if action == "resume":
        return lambda k: k.resume(occ, request_id=rid, operator="op")
    assert action == "cancel"
    return lambda k: k.cancel(occ, request_id=rid, operator="op")


@pytest.mark.parametrize(
    "action", ["pause", "resume", "requeue", "adjudicate", "cancel", "run_now"]
)
def test_one_request_id_used_twice_at_once(world: World, action: str) -> None:
    """Both calls answer; exactly one did the action, the other is its deduplicated replay."""

    def round_(i: int) -> None:
        rid = world.stage.next_id(action)
        occ, event = _stage_for(world.stage, action, i)
        call = _operator_call(action, occ, rid, i)
        first, second = world.race(i, call, call, hold=occ)
        assert first.ok and second.ok, f"round {i}: {first}, {second}"
        dedup = sorted([first.value.deduplicated, second.value.deduplicated])
        assert dedup == [False, True], f"round {i}: deduplicated {dedup}"
        target = first.value.occurrence.id
        assert second.value.occurrence.id == target and occ in (None, target)
        logged = [t for t, d in world.state(target)["events"] if t == event]
        assert len(logged) == 1, f"round {i}: {event} logged {len(logged)} times"

    world.repeat(round_)


# -- two operators, two request ids ------------------------------------------------------------


def test_requeue_vs_adjudicate(world: World) -> None:
    """Adjudication always lands; a requeue only after an ``abandon`` made it a dead letter."""

    def round_(i: int) -> None:
        claim = world.stage.awaiting_adjudication()
        decision = ("abandon", "applied", "not_applied")[i % 3]
        occ, rid_a, rid_r = claim.occurrence.id, world.stage.next_id("a"), world.stage.next_id("r")
        adjudicated, requeued = world.race(
            i,
            lambda k: k.adjudicate(occ, decision=decision, request_id=rid_a, operator="op"),
            lambda k: k.requeue(
                occ,
                expected_fence=claim.fence,
                expected_error_code="ABANDONED",
                request_id=rid_r,
                operator="op",
            ),
            hold=occ,
        )
        assert adjudicated.ok, f"round {i}: adjudication refused: {adjudicated}"
        state = world.state(occ)
        unused = [g for g in state["grants"] if g["claimed_at"] is None]
        want = {"abandon": "dead_letter", "applied": "succeeded", "not_applied": "retry_wait"}
        if requeued.ok:
            assert decision == "abandon", f"round {i}: requeued after {decision}"
            assert state["occurrence"]["status"] == "retry_wait" and len(unused) == 1
        else:
            assert requeued.code == "STATE_CONFLICT", f"round {i}: {requeued}"
            assert state["occurrence"]["status"] == want[decision]
            assert len(unused) == (decision == "not_applied"), f"round {i}: grants {unused}"

    world.repeat(round_)


@pytest.mark.parametrize("action", ["adjudicate", "requeue", "resume", "cancel"])
def test_two_operators_at_once(world: World, action: str) -> None:
    """The same action under two request ids: one acts; the other finds it done (refused),
    except a cancel of a running occurrence, which both may ask (the second asks nothing new)."""

    def round_(i: int) -> None:
        rids = [world.stage.next_id(action), world.stage.next_id(action)]
        occ, event = _stage_for(world.stage, action, i)
        assert occ is not None
        calls = [_operator_call(action, occ, rid, i) for rid in rids]
        outcomes = world.race(i, *calls, hold=occ)
        accepted = [o for o in outcomes if o.ok]
        if action == "cancel" and i % 2:
            assert len(accepted) == 2, f"round {i}: {outcomes}"
        else:
            assert len(accepted) == 1, f"round {i}: {outcomes}"
            assert {o.code for o in outcomes if not o.ok} == {"STATE_CONFLICT"}
        logged = [t for t, d in world.state(occ)["events"] if t == event]
        assert len(logged) == 1, f"round {i}: {event} logged {len(logged)} times"
        if action == "cancel" and i % 2:
            world.stage.kernel.cancelled(occ, owner="w1", fence=1)

    world.repeat(round_, rounds=40)


# -- claimers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["claim+claim", "claim+claim_next", "claim_next+claim_next"])
def test_two_claimers(world: World, mode: str) -> None:
    """Exactly one claimer takes a queued occurrence, at fence 1."""

    def round_(i: int) -> None:
        (occ,) = world.stage.fresh()
        by_id = lambda k: k.claim(occ, owner="by-id", lease=LEASE_S)  # noqa: E731
        nxt = lambda k: k.claim_next(owner="next", lease=LEASE_S)  # noqa: E731
        ops = {"claim+claim": (by_id, by_id), "claim+claim_next": (by_id, nxt)}.get(
            mode, (nxt, nxt)
        )
        # A held row is skipped by claim_next (SKIP LOCKED): hold only for claims by id.
        outcomes = world.race(i, *ops, hold=occ if mode == "claim+claim" else None)
        winners = [o.value for o in outcomes if o.ok and o.value is not None]
        assert len(winners) == 1, f"round {i}: {outcomes}"
        assert (winners[0].occurrence.id, winners[0].fence) == (occ, 1)
        world.state(occ)
        world.stage.kernel.succeed(occ, owner=winners[0].owner, fence=1)

    world.repeat(round_)


def test_two_pumps_hint_each_occurrence_once(world: World) -> None:
    """Two Beats' pumps at once: each claimable occurrence is hinted by one of them (the
    statement that picks them marks them, skipping rows the other has locked)."""

    def round_(i: int) -> None:
        made = set(world.stage.fresh(n=4))
        pump = lambda k: [h.occurrence_id for h in k.dispatch_batch(limit=10, rehint_after=3600)]  # noqa: E731
        first, second = world.race(i, pump, pump, hold=None)
        assert first.ok and second.ok, f"round {i}: {first} {second}"
        assert not set(first.value) & set(second.value), f"round {i}: {first} {second}"
        assert set(first.value) | set(second.value) == made, f"round {i}: {first} {second}"

    world.repeat(round_)


@pytest.mark.parametrize("mode", ["claim", "claim_next"])
@pytest.mark.parametrize("gate", ["exclusive", "pool"])
def test_gates_admit_one_of_two_claimers(world: World, gate: str, mode: str) -> None:
    """Two occurrences of an overlap-queue job, or of two jobs in a pool of 1: one runs."""

    def round_(i: int) -> None:
        if gate == "exclusive":
            pair = world.stage.fresh("queue", 2)
        else:
            pair = world.stage.fresh("pool-a") + world.stage.fresh("pool-b")

        def claimer(occ: int, owner: str) -> Callable[[Kernel], Any]:
            if mode == "claim":
                return lambda k: k.claim(occ, owner=owner, lease=LEASE_S)
            return lambda k: k.claim_next(owner=owner, lease=LEASE_S)

        outcomes = world.race(i, claimer(pair[0], "a"), claimer(pair[1], "b"), hold=None)
        winners = [o.value for o in outcomes if o.ok and o.value is not None]
        assert len(winners) == 1, f"round {i}: {gate} admitted {outcomes}"
        for occ in pair:
            world.state(occ)
        assert not counter_problems(world.stage.kernel), f"round {i}: {outcomes}"
        world.stage.kernel.succeed(winners[0].occurrence.id, owner=winners[0].owner, fence=1)
        assert not counter_problems(world.stage.kernel), f"round {i}: after the settle"
        for occ in pair:
            if occ != winners[0].occurrence.id:
                world.stage.kernel.cancel(occ, request_id=world.stage.next_id("c"), operator="op")

    world.repeat(round_, rounds=40)


# -- Beat ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("job_id", ["amo", "once"])
def test_lease_expiry_vs_settle(world_factory: Callable[..., World], job_id: str) -> None:
    """The holder settles as Beat, whose transaction began a lease later, expires: one wins."""
    world = world_factory(ahead_s=LEASE_S + 1)

    def round_(i: int) -> None:
        claim = world.stage.running(job_id)
        occ, held = claim.occurrence.id, _held(claim)

        def settle(k: Kernel) -> Any:
            if i % 2:
                return k.fail(occ, **held, code="BOOM", message="m", retryable=True)
            return k.succeed(occ, **held)

        settled, expired = world.race(i, settle, lambda k: k.expire_leases(), hold=occ)
        assert expired.ok, f"round {i}: {expired}"
        took = sum(expired.value.values())
        if settled.ok:
            assert took == 0, f"round {i}: settled and expired: {expired.value}"
        else:
            assert settled.code == "LEASE_LOST" and took == 1, f"round {i}: {settled}, {expired}"
        status = world.status(occ)
        assert status != "running", f"round {i}: {settled}, {expired}"
        if status == "needs_adjudication":
            world.stage.kernel.adjudicate(
                occ, decision="applied", request_id=world.stage.next_id("a"), operator="op"
            )
        world.clock.advance(2 * LEASE_S)

    world.repeat(round_, rounds=40)


def test_two_beats_fire_one_cursor(world: World) -> None:
    """Two Beats advance the same cursor with the same firings: one does, once."""

    def round_(i: int) -> None:
        job = world.stage.kernel.get_job("alo")
        keys = [world.stage.next_id("beat") for _ in range(2)]
        after = world.stage.next_id("cursor")

        def fire(k: Kernel) -> Any:
            return k.fire(
                "alo",
                expected_revision=job.revision,
                expected_cursor=job.next_trigger_key,
                firings=[(key, world.clock.now) for key in keys],
                next_cursor=(after, world.clock.now),
            )

        outcomes = world.race(i, fire, fire, hold=None)
        assert all(o.ok for o in outcomes), f"round {i}: {outcomes}"
        fresh = [o.value for o in outcomes if not o.value.stale]
        assert len(fresh) == 1 and len(fresh[0].created) == 2, f"round {i}: {outcomes}"
        for occ in fresh[0].created:
            assert world.status(occ) == "queued"
            world.stage.kernel.cancel(occ, request_id=world.stage.next_id("c"), operator="op")

    world.repeat(round_, rounds=40)
