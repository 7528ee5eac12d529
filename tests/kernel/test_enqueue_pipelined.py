"""A large batch's rows are made while the first ones are inserted (issue 42 item 2): on
PostgreSQL its statements are pipelined in one transaction (kernel/jobs/batch_rows.py,
kernel/occurrences/rows.py ``insert_chunks``). Everything a single statement gave still
holds: one instant, every event, keys deduplicated across statements, a failure in a later
statement leaves nothing written and is the error a single statement raises, and the
connection serves the next call. Each on both back ends, with the kernel's own clock (the
server's on PostgreSQL: the first statement reads it, the next are given it)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
import sqlalchemy as sa
from servers import libpq_url

import kernel.statements
from kernel import EnqueueRequest
from kernel.db.schema import events, occurrences
from kernel.errors import InvalidArgument, StateConflict
from kernel.store import Kernel

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

TASK = "proj.pipelined"
BATCH = 500


@pytest.fixture
def kernel_of(k: Harness) -> Iterator[Kernel]:
    """A kernel on the harness's database with its default clock (the server's on PostgreSQL)."""
    opened = Kernel.open(k.url)
    try:
        opened.enqueue(task=TASK, args=["first"])  # defines the task's job
        yield opened
    finally:
        opened.close()


def _counts(kernel: Kernel) -> tuple[int, int]:
    with kernel.engine.connect() as conn:
        made = conn.execute(sa.select(sa.func.count()).select_from(occurrences)).scalar_one()
        logged = conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one()
    return made, logged


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of each enqueue statement sent."""
    counts: list[int] = []
    params = kernel.statements.enqueue_params

    def counted(dialect: str, rows: Any) -> dict[str, Any]:
        counts.append(len(rows))
        return params(dialect, rows)

    monkeypatch.setattr(kernel.statements, "enqueue_params", counted)
    return counts


def test_a_large_batch_is_one_instant_with_every_event(
    k: Harness, kernel_of: Kernel, sent: list[int]
) -> None:
    made = kernel_of.enqueue_many([EnqueueRequest(TASK, [i]) for i in range(BATCH)])
    # PostgreSQL: a fifth first, the rest made while the server inserts it; SQLite: one.
    assert sent == ([100, 400] if k.backend == "postgres" else [BATCH])
    ids = [m.occurrence_id for m in made]
    assert len(set(ids)) == BATCH and not any(m.deduplicated for m in made)
    with kernel_of.engine.connect() as conn:
        instants = conn.execute(
            sa.select(occurrences.c.created_at).where(occurrences.c.id.in_(ids)).distinct()
        ).all()
        logged = conn.execute(
            sa.select(events.c.occurrence_id, events.c.type, events.c.at).where(
                events.c.occurrence_id.in_(ids)
            )
        ).all()
    assert len(instants) == 1
    assert sorted(e.occurrence_id for e in logged) == sorted(ids)
    assert {(e.type, e.at) for e in logged} == {("occurrence_created", instants[0][0])}


def test_keys_are_deduplicated_across_a_batchs_statements(kernel_of: Kernel) -> None:
    before = kernel_of.enqueue(task=TASK, args=["old"], key="old")
    requests = [EnqueueRequest(TASK, [i]) for i in range(BATCH)]
    requests[10] = EnqueueRequest(TASK, ["a"], key="twice")  # in the first statement
    requests[400] = EnqueueRequest(TASK, ["b"], key="twice")  # in the second
    requests[450] = EnqueueRequest(TASK, ["c"], key="old")  # made before the batch
    made_before = _counts(kernel_of)[0]
    made = kernel_of.enqueue_many(requests)
    assert not made[10].deduplicated
    assert made[400].deduplicated and made[400].occurrence_id == made[10].occurrence_id
    assert made[450].deduplicated and made[450].occurrence_id == before.occurrence_id
    assert _counts(kernel_of)[0] == made_before + BATCH - 2
    assert kernel_of.get_occurrence(made[400].occurrence_id).payload["args"] == ["a"]


def _refuse_marked_rows(kernel: Kernel, backend: str) -> None:
    """A trigger that refuses an occurrence whose arguments carry ``refuse-me``."""
    with kernel.engine.begin() as conn:
        if backend == "postgres":
            conn.exec_driver_sql(
                "CREATE FUNCTION refuse_marked() RETURNS trigger AS $$ BEGIN "
                "IF strpos(NEW.definition, 'refuse-me') > 0 THEN "
                "RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'check_violation'; "
                "END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse_marked BEFORE INSERT ON occurrences "
                "FOR EACH ROW EXECUTE FUNCTION refuse_marked()"
            )
        else:
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse_marked BEFORE INSERT ON occurrences "
                "WHEN instr(NEW.definition, 'refuse-me') > 0 "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )


def _refused(kernel: Kernel, at: int, size: int = BATCH) -> BaseException:
    requests = [EnqueueRequest(TASK, [i]) for i in range(size)]
    requests[at] = EnqueueRequest(TASK, ["refuse-me"])
    with pytest.raises(Exception) as caught:
        kernel.enqueue_many(requests)
    return caught.value


def _at_once(callers: list[Kernel], batch: list[EnqueueRequest]) -> list[list[Any]]:
    """Each caller's ``enqueue_many(batch)``, released together."""
    barrier = threading.Barrier(len(callers))

    def call(caller: Kernel) -> list[Any]:
        barrier.wait()
        return caller.enqueue_many(batch)

    with ThreadPoolExecutor(len(callers)) as pool:
        return list(pool.map(call, callers))


def test_callers_of_the_same_large_batch_at_once_make_each_key_once(
    k: Harness, kernel_of: Kernel, sent: list[int]
) -> None:
    # Released together on their own connections, each caller's batch crosses its statements
    # (PostgreSQL: 60 + 240) while the others insert the same keys: every key is one
    # occurrence with one creation event, made by exactly one caller and found by the rest.
    callers = [Kernel.open(k.url) for _ in range(4)]
    try:
        for round_ in range(2):
            batch = [EnqueueRequest(TASK, [i], key=f"race-{round_}-{i}") for i in range(300)]
            answers = _at_once(callers, batch)
            for i in range(300):
                per_key = [answer[i] for answer in answers]
                assert len({a.occurrence_id for a in per_key}) == 1, (round_, i)
                assert sum(not a.deduplicated for a in per_key) == 1, (round_, i)
            ids = [a.occurrence_id for a in answers[0]]
            with kernel_of.engine.connect() as conn:
                created = conn.execute(
                    sa.select(events.c.occurrence_id).where(
                        events.c.occurrence_id.in_(ids), events.c.type == "occurrence_created"
                    )
                ).scalars().all()  # fmt: skip
            assert sorted(created) == sorted(ids), round_
        assert sent.count(60) == (8 if k.backend == "postgres" else 0)
    finally:
        for caller in callers:
            caller.close()


def test_a_failure_in_a_later_statement_writes_nothing_and_is_the_statements_error(
    k: Harness, kernel_of: Kernel, caplog: pytest.LogCaptureFixture
) -> None:
    _refuse_marked_rows(kernel_of, k.backend)
    counts = _counts(kernel_of)
    caplog.set_level(logging.WARNING)
    alone = _refused(kernel_of, 10, size=50)  # one statement
    in_first = _refused(kernel_of, 10)
    in_later = _refused(kernel_of, 450)  # PostgreSQL: sent while the first one ran
    assert type(in_first) is type(alone) and type(in_later) is type(alone)
    assert "refused by the test" in str(in_later)
    assert _counts(kernel_of) == counts
    assert not [r for r in caplog.records if "ignored" in r.getMessage()]
    # The connection serves the next batch, pipelined again.
    made = kernel_of.enqueue_many([EnqueueRequest(TASK, [i]) for i in range(BATCH)])
    assert _counts(kernel_of) == (counts[0] + BATCH, counts[1] + BATCH)
    assert len({m.occurrence_id for m in made}) == BATCH


def test_a_refused_request_after_the_first_statement_writes_nothing(kernel_of: Kernel) -> None:
    counts = _counts(kernel_of)
    requests = [EnqueueRequest(TASK, [i]) for i in range(BATCH)]
    requests[450] = EnqueueRequest(TASK, [450], key="k" * 1000)
    with pytest.raises(InvalidArgument) as refused:
        kernel_of.enqueue_many(requests)
    assert refused.value.field == "requests[450].key"
    assert _counts(kernel_of) == counts
    requests[450] = EnqueueRequest(TASK, [450])
    assert len(kernel_of.enqueue_many(requests)) == BATCH


def test_max_queued_counts_every_statement_of_a_batch(kernel_of: Kernel) -> None:
    settings = {"max_queued": BATCH - 1}
    counts = _counts(kernel_of)
    with pytest.raises(StateConflict) as refused:
        kernel_of.enqueue_many([EnqueueRequest(TASK, [i], settings=settings) for i in range(BATCH)])
    assert refused.value.details["reason"] == "queue_full"
    assert _counts(kernel_of)[0] == counts[0]


def test_a_large_batch_in_a_callers_psycopg_transaction(
    k: Harness, kernel_of: Kernel, sent: list[int]
) -> None:
    # Pipelined on the caller's connection, inside the caller's transaction: nothing until
    # the caller commits, nothing when it rolls back; the caller's own statements go on.
    if k.backend == "sqlite":
        pytest.skip("a psycopg connection is PostgreSQL's")
    counts = _counts(kernel_of)
    requests = [EnqueueRequest(TASK, [i], key=f"caller-{i}") for i in range(BATCH)]
    with psycopg.connect(libpq_url(k.url)) as conn:
        conn.execute("SELECT 1")
        kernel_of.enqueue_many(requests, connection=conn)
        assert conn.execute("SELECT count(*) FROM occurrences").fetchone() == (counts[0] + BATCH,)
        conn.rollback()
        assert _counts(kernel_of) == counts
        made = kernel_of.enqueue_many(requests, connection=conn)
        assert _counts(kernel_of) == counts  # not committed yet
        conn.commit()
    assert _counts(kernel_of) == (counts[0] + BATCH, counts[1] + BATCH)
    assert not any(m.deduplicated for m in made)
    assert sent == [100, 400] * 2
