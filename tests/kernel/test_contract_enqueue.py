"""Enqueue (issue 27): a task's ad hoc run as an occurrence, idempotent by key, and
inside a caller's transaction; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
import sqlalchemy as sa
from servers import libpq_url

from kernel import EnqueueRequest, InvalidArgument
from kernel.store import Kernel

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

TASK = "proj.send_invoice"
SETTINGS = {"max_attempts": 2, "timeout": 30.0}


def _hinted_ids(kernel: Kernel) -> set[int]:
    return {h.occurrence_id for h in kernel.dispatch_batch(limit=100, rehint_after=3600)}


def test_an_enqueued_run_is_an_occurrence_of_the_tasks_implicit_job(k: Harness) -> None:
    made = k.kernel.enqueue(task=TASK, args=[42], kwargs={"copy": True}, settings=SETTINGS)
    assert not made.deduplicated and made.job_id == "task:proj.send_invoice"
    occ = k.kernel.get_occurrence(made.occurrence_id)
    assert occ.status == "queued" and occ.trigger_key.startswith("enqueue:")
    assert occ.payload == {"task": TASK, "args": [42], "kwargs": {"copy": True}}
    assert occ.max_attempts == 2 and occ.definition["timeout"] == 30.0
    job = k.kernel.get_job("task:proj.send_invoice")
    assert job.spec["kind"] == "task" and job.spec["schedule"] is None
    assert job.spec["overlap"] == "allow"
    assert k.event_types(made.occurrence_id) == ["occurrence_created"]
    assert _hinted_ids(k.kernel) == {made.occurrence_id}  # the pump hints it
    claim = k.kernel.claim(made.occurrence_id, owner="w1", lease=30)
    assert claim is not None


def test_the_same_key_is_the_same_occurrence(k: Harness) -> None:
    first = k.kernel.enqueue(task=TASK, args=[1], key="order-1")
    again = k.kernel.enqueue(task=TASK, args=[1], key="order-1")
    other = k.kernel.enqueue(task=TASK, args=[1], key="order-2")
    assert again.occurrence_id == first.occurrence_id and again.deduplicated
    assert other.occurrence_id != first.occurrence_id
    assert k.kernel.get_occurrence(first.occurrence_id).trigger_key == "key:order-1"
    long_key = "k" * 200
    assert not k.kernel.enqueue(task=TASK, key=long_key).deduplicated
    assert k.kernel.enqueue(task=TASK, key=long_key).deduplicated


def test_a_batch_is_one_transaction_and_dedupes_within_itself(k: Harness) -> None:
    made = k.kernel.enqueue_many(
        [EnqueueRequest(TASK, [i], key=f"b{i % 3}") for i in range(5)]
        + [EnqueueRequest("proj.other", [9])]
    )
    assert [m.deduplicated for m in made] == [False, False, False, True, True, False]
    assert made[3].occurrence_id == made[0].occurrence_id
    assert {m.job_id for m in made} == {"task:proj.send_invoice", "task:proj.other"}
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many([EnqueueRequest(TASK, [1]), EnqueueRequest(TASK, [{1, 2}])])
    assert refused.value.field == "requests[1].args[0]"
    assert len(k.kernel.list_occurrences(limit=100)) == 4  # nothing of the refused batch


#: Bad input, and the field its refusal names.
REFUSED = [
    ({"args": [1, {"when": object()}]}, "args[1].when"),
    ({"kwargs": {"at": {1}}}, "kwargs.at"),
    ({"key": "x" * 201}, "key"),
    ({"eta": datetime(2030, 1, 1)}, "eta"),
    ({"countdown": -1}, "countdown"),
    ({"priority": 256}, "priority"),
    ({"delivery": "twice"}, "delivery"),
    ({"queue": "no spaces"}, "queue"),
    ({"task": "bad name"}, "task"),
    ({"request": {"headers": 3}}, "request.headers"),
    ({"request": {"time_limit": -1}}, "request.time_limit"),
    ({"request": {"stamps": {"s": {1}}}}, "request.stamps.s"),
    ({"request": {"timeout": 5}}, "request.timeout"),
    ({"request": {"headers": {"h": "x" * 40_000}}}, "request"),
]


def test_bad_input_is_refused_naming_the_field_and_writes_nothing(k: Harness) -> None:
    for fields, field in REFUSED:
        with pytest.raises(InvalidArgument) as refused:
            k.kernel.enqueue(**{"task": TASK, **fields})  # type: ignore[arg-type]
        assert refused.value.field == field
    assert k.kernel.list_occurrences(limit=10) == [] and k.kernel.list_jobs() == []


def test_countdown_eta_and_priority(k: Harness) -> None:
    later = k.kernel.enqueue(task=TASK, countdown=60)
    at = k.kernel.enqueue(task=TASK, eta=k.clock.now + timedelta(minutes=2))
    low = k.kernel.enqueue(task=TASK)
    high = k.kernel.enqueue(task=TASK, priority=9)
    assert not later.claimable and not at.claimable
    hints = k.kernel.dispatch_batch(limit=100, rehint_after=30)
    assert [h.occurrence_id for h in hints] == [high.occurrence_id, low.occurrence_id]
    assert k.kernel.claim(later.occurrence_id, owner="w", lease=30) is None
    k.clock.advance(61)
    assert _hinted_ids(k.kernel) == {later.occurrence_id}
    k.clock.advance(60)
    assert _hinted_ids(k.kernel) == {at.occurrence_id}


def test_an_enqueued_runs_times_and_its_event_are_read_against_one_instant(k: Harness) -> None:
    # The statement reads the instant itself (PostgreSQL builds the event's JSON in SQL,
    # SQLite in Python): the same times and the same event on both, alone or in a batch.
    now_ms = int(k.clock.now.timestamp() * 1000)
    eta = k.clock.now + timedelta(minutes=2)
    past = k.clock.now - timedelta(minutes=2)
    deadline = k.clock.now + timedelta(hours=1)
    for made in (
        [k.kernel.enqueue(task=TASK, key="one", countdown=60, priority=7, expires=30)],
        k.kernel.enqueue_many(
            [
                EnqueueRequest(TASK, key="eta", eta=eta, expires=deadline),
                EnqueueRequest(TASK, key="past", eta=past),
                EnqueueRequest(TASK, key="plain", priority=0),
            ]
        ),
    ):
        for answer in made:
            occurrence = k.kernel.get_occurrence(answer.occurrence_id)
            [event] = k.kernel.events(occurrence_id=answer.occurrence_id)
            start = int(occurrence.available_at.timestamp() * 1000)
            assert occurrence.created_at == k.clock.now == event.at
            assert occurrence.scheduled_for == occurrence.available_at
            assert answer.claimable == (start == now_ms)
            assert answer.not_before == (None if answer.claimable else occurrence.available_at)
            expected = {"enqueued": True, "revision": 1, "scheduled_for": start,
                        "trigger_key": occurrence.trigger_key}  # fmt: skip
            if occurrence.expires_at is not None:
                expected["expires_at"] = int(occurrence.expires_at.timestamp() * 1000)
            if answer.priority:
                expected["priority"] = answer.priority
            assert event.data == expected
    starts = {
        o.trigger_key: (o.available_at, o.expires_at) for o in k.kernel.list_occurrences(limit=9)
    }
    assert starts == {
        "key:one": (k.clock.now + timedelta(seconds=60), k.clock.now + timedelta(seconds=30)),
        "key:eta": (eta, deadline),
        "key:past": (k.clock.now, None),
        "key:plain": (k.clock.now, None),
    }


def test_a_held_back_run_hinted_by_its_caller_is_the_pumps_only_past_rehint_after(
    k: Harness,
) -> None:
    """The caller publishes a held-back run's hint at once, for its time (Celery's eta):
    ``not_before`` says when, and the pump hints it only ``rehint_after`` past that
    time, as it waits for a hint published at once."""
    later = k.kernel.enqueue(task=TASK, countdown=60, hinted=True)
    now = k.kernel.enqueue(task=TASK, hinted=True)
    assert later.not_before == k.clock.now + timedelta(seconds=60)
    assert now.not_before is None and now.claimable
    assert k.kernel.enqueue(task=TASK, countdown=60, key="x", hinted=True).not_before
    assert k.kernel.enqueue(task=TASK, countdown=60, key="x").not_before is None  # found
    k.clock.advance(61)
    assert later.occurrence_id not in _hinted_ids_after(k.kernel, 30)
    k.clock.advance(30)
    assert later.occurrence_id in _hinted_ids_after(k.kernel, 30)


def _hinted_ids_after(kernel: Kernel, rehint_after: float) -> set[int]:
    return {h.occurrence_id for h in kernel.dispatch_batch(limit=100, rehint_after=rehint_after)}


def test_an_operator_disable_holds_enqueued_runs_and_survives_a_new_process(k: Harness) -> None:
    k.kernel.enqueue(task=TASK, settings=SETTINGS)
    k.kernel.set_job_enabled("task:proj.send_invoice", False)
    other = Kernel.open(k.url, clock=k.clock)  # another process: defines the job again
    try:
        held = other.enqueue(task=TASK, settings={**SETTINGS, "max_attempts": 4})
    finally:
        other.close()
    job = k.kernel.get_job("task:proj.send_invoice")
    assert not job.enabled and job.spec["max_attempts"] == 4
    assert held.occurrence_id not in _hinted_ids(k.kernel)


def test_a_deleted_implicit_job_is_defined_again(k: Harness) -> None:
    made = k.kernel.enqueue(task=TASK)
    k.kernel.cancel(made.occurrence_id, request_id="r1", operator="t")
    k.kernel.delete_job("task:proj.send_invoice")
    again = k.kernel.enqueue(task=TASK)  # this kernel still believes it defined it
    assert k.kernel.get_occurrence(again.occurrence_id).status == "queued"


def _caller_engine(k: Harness) -> sa.Engine:
    return sa.create_engine(k.url, poolclass=sa.pool.NullPool)


def test_in_a_rolled_back_transaction_nothing_exists_and_nothing_is_hinted(k: Harness) -> None:
    engine = _caller_engine(k)
    with engine.connect() as conn:
        trans = conn.begin()
        made = k.kernel.enqueue(task=TASK, key="order-7", connection=conn)
        assert conn.execute(sa.text("SELECT count(*) FROM occurrences")).scalar() == 1
        trans.rollback()
    assert k.kernel.list_occurrences(limit=10) == []
    assert _hinted_ids(k.kernel) == set()
    with engine.begin() as conn:
        committed = k.kernel.enqueue(task=TASK, key="order-7", connection=conn)
    assert not committed.deduplicated
    assert k.kernel.get_occurrence(committed.occurrence_id).status == "queued"
    assert _hinted_ids(k.kernel) == {committed.occurrence_id}
    assert made.occurrence_id is not None
    engine.dispose()


def test_a_kernel_opened_after_the_callers_write_enqueues_in_its_transaction(
    k: Harness,
) -> None:
    """The first transactional enqueue of a process (issue 39 item 6): the caller wrote in
    its transaction, then its process opens the kernel (migrating, as a client does) and
    enqueues on the connection. Opening takes no write lock: on SQLite the caller's own
    write holds it until the commit."""
    engine = _caller_engine(k)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE orders (id INTEGER PRIMARY KEY)"))
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO orders (id) VALUES (1)"))
        fresh = Kernel.open(k.url, migrate_schema=True, clock=k.clock, busy_timeout_ms=300)
        try:
            made = fresh.enqueue(task=TASK, key="order-1", connection=conn)
        finally:
            fresh.close()
    assert k.kernel.get_occurrence(made.occurrence_id).trigger_key == "key:order-1"
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM orders")).scalar() == 1
    engine.dispose()


def test_a_connection_the_kernel_cannot_write_through_is_refused(
    k: Harness, tmp_path: Path, postgres_url: str
) -> None:
    engine = _caller_engine(k)
    with engine.connect() as conn, pytest.raises(InvalidArgument, match="no open transaction"):
        k.kernel.enqueue(task=TASK, connection=conn)
    with pytest.raises(InvalidArgument, match="SQLAlchemy Connection or a psycopg"):
        k.kernel.enqueue(task=TASK, connection=object())
    with psycopg.connect(libpq_url(postgres_url)) as foreign:
        if k.backend == "sqlite":
            with pytest.raises(InvalidArgument, match="this kernel is on SQLite"):
                k.kernel.enqueue(task=TASK, connection=foreign)
            other = sa.create_engine(f"sqlite:///{tmp_path}/other.db")
            with other.begin() as conn, pytest.raises(InvalidArgument, match="kernel's own"):
                k.kernel.enqueue(task=TASK, connection=conn)
        else:  # the server's default database, not the test's own
            with pytest.raises(InvalidArgument, match="not the kernel's"):
                k.kernel.enqueue(task=TASK, connection=foreign)
    assert k.kernel.list_occurrences(limit=10) == []
    engine.dispose()


def test_a_psycopg_connection_joins_its_transaction(k: Harness) -> None:
    if k.backend == "sqlite":
        pytest.skip("a psycopg connection is PostgreSQL's (refused on SQLite: above)")
    with psycopg.connect(libpq_url(k.url)) as conn:
        conn.execute("SELECT 1")
        k.kernel.enqueue(task=TASK, key="pg-1", connection=conn)
        conn.rollback()
        assert k.kernel.list_occurrences(limit=10) == []
        made = k.kernel.enqueue(task=TASK, key="pg-1", connection=conn)
        assert k.kernel.list_occurrences(limit=10) == []  # not committed yet
        conn.commit()
        assert not conn.closed
    assert k.kernel.get_occurrence(made.occurrence_id).trigger_key == "key:pg-1"


def _callers(k: Harness, n: int) -> list[Kernel]:
    """``n`` kernels of their own (engines, connections), each with the job defined, so
    that what races is the insert."""
    callers = [Kernel.open(k.url, clock=k.clock) for _ in range(n)]
    for caller in callers:
        caller.enqueue(task=TASK)
    return callers


def _at_once(callers: list[Kernel], key: str) -> list[object]:
    barrier = threading.Barrier(len(callers))

    def call(caller: Kernel) -> object:
        barrier.wait()
        return caller.enqueue(task=TASK, key=key)

    with ThreadPoolExecutor(len(callers)) as pool:
        return list(pool.map(call, callers))


def test_the_same_key_from_callers_at_once_is_one_occurrence(k: Harness) -> None:
    callers = _callers(k, 6)
    try:
        for round_ in range(3):
            answers = _at_once(callers, f"race-{round_}")
            assert len({a.occurrence_id for a in answers}) == 1  # type: ignore[attr-defined]
            assert sum(not a.deduplicated for a in answers) == 1  # type: ignore[attr-defined]
            made = answers[0].occurrence_id  # type: ignore[attr-defined]
            assert k.event_types(made) == ["occurrence_created"]
    finally:
        for caller in callers:
            caller.close()


def test_callers_of_a_key_an_open_transaction_holds_wait_for_it_and_get_its_occurrence(
    k: Harness,
) -> None:
    callers = _callers(k, 4)
    engine = _caller_engine(k)
    try:
        with engine.connect() as conn:
            trans = conn.begin()
            held = k.kernel.enqueue(task=TASK, key="held", connection=conn)
            with ThreadPoolExecutor(len(callers)) as pool:
                racing = pool.submit(_at_once, callers, "held")
                time.sleep(0.5)
                assert not racing.done()  # queued behind the uncommitted key
                trans.commit()
                answers = racing.result(timeout=20)
        assert {a.occurrence_id for a in answers} == {held.occurrence_id}  # type: ignore[attr-defined]
        assert all(a.deduplicated for a in answers)  # type: ignore[attr-defined]
    finally:
        engine.dispose()
        for caller in callers:
            caller.close()


def test_a_runs_own_timeout_is_its_definitions_not_its_jobs(k: Harness) -> None:
    """A routed ``apply_async(time_limit=...)``: this run's limit, the job unchanged."""
    own = k.kernel.enqueue(task=TASK, settings=SETTINGS, timeout=5.5)
    plain = k.kernel.enqueue(task=TASK, settings=SETTINGS)
    assert own.timeout == 5.5 and plain.timeout == 30.0
    assert k.kernel.get_occurrence(own.occurrence_id).definition["timeout"] == 5.5
    assert k.kernel.get_occurrence(plain.occurrence_id).definition["timeout"] == 30.0
    assert k.kernel.get_job("task:proj.send_invoice").spec["timeout"] == 30.0
    hints = {h.occurrence_id: h.timeout for h in k.kernel.dispatch_batch(limit=9, rehint_after=30)}
    assert hints == {own.occurrence_id: 5.5, plain.occurrence_id: 30.0}
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue(task=TASK, timeout=-1)
    assert refused.value.field == "timeout"


def test_a_runs_celery_request_fields_are_its_payloads(k: Harness) -> None:
    """What a routed Celery call set for its body's ``self.request`` is kept with the run,
    in its payload (only the fields given); a run without any has none."""
    given = {"headers": {"tenant": "t"}, "time_limit": 30, "ignore_result": False,
             "stamped_headers": ["m"], "stamps": {"m": "1"}, "argsrepr": "(x,)"}  # fmt: skip
    own = k.kernel.enqueue(task=TASK, args=[1], request={**given, "properties": None})
    plain = k.kernel.enqueue(task=TASK, args=[1], request={})
    assert k.kernel.get_occurrence(own.occurrence_id).payload == {
        "task": TASK, "args": [1], "kwargs": {}, "request": {**given, "time_limit": 30.0},
    }  # fmt: skip
    assert "request" not in k.kernel.get_occurrence(plain.occurrence_id).payload
    assert "request" not in k.kernel.get_job("task:proj.send_invoice").spec["payload"]


def test_a_task_s_overlap_queue_runs_its_calls_one_at_a_time_in_order(k: Harness) -> None:
    """``overlap: queue`` among a task's settings (its ``kernel_options``): its calls run
    one at a time, the earlier first, also a chord's members made together."""
    queued = {"overlap": "queue"}
    first = k.kernel.enqueue(task=TASK, settings=queued).occurrence_id
    later = k.kernel.enqueue(task=TASK, settings=queued).occurrence_id
    assert k.kernel.claim(later, owner="w2", lease=30) is None  # the earlier goes first
    claim = k.kernel.claim(first, owner="w1", lease=30)
    assert claim is not None
    assert k.kernel.claim(later, owner="w2", lease=30) is None  # while it runs
    k.kernel.succeed(first, owner="w1", fence=claim.fence)
    assert k.kernel.claim(later, owner="w2", lease=30) is not None
    members = k.kernel.enqueue_many(
        [EnqueueRequest("proj.member", args=[i], settings=queued) for i in range(2)],
        chord={"id": "g1", "body": {"task": "proj.tsum", "options": {"task_id": "b1"}}},
    )
    assert k.kernel.claim(members[0].occurrence_id, owner="w1", lease=30) is not None
    assert k.kernel.claim(members[1].occurrence_id, owner="w2", lease=30) is None


@pytest.mark.parametrize("policy", ["skip", "replace"])
def test_a_task_s_overlap_skip_or_replace_is_refused_naming_it(k: Harness, policy: str) -> None:
    """A call is made to run: a policy that would drop it (skip) or cancel the one running
    (replace) belongs to a Beat entry or a job file, not to a task's calls."""
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue(task=TASK, settings={"overlap": policy})
    assert refused.value.field == "settings.overlap"
    assert f"{policy!r}" in str(refused.value) and "'queue'" in str(refused.value)
    assert k.kernel.list_occurrences(limit=10) == []
