"""How Beat's pump packs hints into messages: a deep queue in batches, anything else alone."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery
from celery.utils.saferepr import saferepr

from celery_app.hints import publish_hints, run_task_id, split_hint, worker_shares
from celery_app.task_names import RUN_OCCURRENCE
from kernel.types import DispatchHint


def published(hints: list[DispatchHint], **options: Any) -> list[tuple[str, list[int], Any]]:
    """(queue, ids, shadow) of each message ``publish_hints`` sends, read back from the broker."""
    app = Celery("pump-test", broker="memory://")
    with app.producer_or_acquire() as producer:
        publish_hints(app, producer, hints, **options)
    found = []
    with app.connection_for_read() as conn:
        for queue in sorted({h.queue for h in hints}):
            with conn.SimpleQueue(queue) as inbox:
                while inbox.qsize():
                    message = inbox.get(timeout=1)
                    assert message.headers["task"] == RUN_OCCURRENCE
                    found.append((queue, message.payload[0], message.headers["shadow"]))
                    message.ack()
    return found


def hint(
    occ_id: int, queue: str = "q", job: str = "j", kind: str = "shell", timeout: Any = None
) -> DispatchHint:
    return DispatchHint(occ_id, job, queue, kind, timeout)


def test_a_deep_queue_goes_in_even_batches_and_a_shallow_one_alone() -> None:
    deep = [hint(i) for i in range(1, 11)]  # 10 > batch_max 4: three messages
    shallow = [hint(i, queue="other") for i in (20, 21)]
    messages = published(deep + shallow, batch_max=4, hint_options={})
    assert messages == [
        ("other", [20], "j"),
        ("other", [21], "j"),
        ("q", [1, 4, 7, 10], "j"),
        ("q", [2, 5, 8], "j"),
        ("q", [3, 6, 9], "j"),
    ]


def test_hints_with_time_limits_or_options_and_mixed_jobs() -> None:
    hints = [hint(i, job="a" if i % 2 else "b") for i in range(1, 6)]
    timed = hint(9, job="timed", kind="callable", timeout=5.0)
    tuned = hint(8, job="tuned")
    messages = published(
        [*hints, timed, tuned], batch_max=2, hint_options={"tuned": {"priority": 3}}
    )
    assert ("q", [9], "timed") in messages and ("q", [8], "tuned") in messages
    batches = [m for m in messages if m[1] not in ([9], [8])]
    # Five batchable hints, at most two per message; a message of two jobs names none.
    assert sorted(i for _, ids, _ in batches for i in ids) == [1, 2, 3, 4, 5]
    assert all(len(ids) <= 2 for _, ids, _ in batches) and len(batches) == 3
    assert all(shadow is None for _, ids, shadow in batches if len(ids) == 2)


def identities(hints: list[DispatchHint], **options: Any) -> list[tuple[list[int], str, Any]]:
    """(ids, message id, shadow) of each message ``publish_hints`` sends to queue ``q``."""
    app = Celery("pump-test", broker="memory://")
    with app.producer_or_acquire() as producer:
        publish_hints(app, producer, hints, **options)
    found = []
    with app.connection_for_read() as conn, conn.SimpleQueue("q") as inbox:
        while inbox.qsize():
            message = inbox.get(timeout=1)
            found.append((message.payload[0], message.headers["id"], message.headers["shadow"]))
            message.ack()
    return found


def test_a_hint_of_one_run_carries_the_runs_task_id_and_a_batch_its_own() -> None:
    routed = DispatchHint(1, "task:proj.add", "q", "task", payload={"task": "proj.add"},
                          trigger_key="key:call-7")  # fmt: skip
    fired = DispatchHint(2, "nightly", "q", "task", payload={"task": "proj.add"},
                         trigger_key="beat:2026-12-05T00:00:00Z")  # fmt: skip
    alone = identities([routed, fired], batch_max=4, hint_options={})
    # A routed call's hint: the caller's task id, under the task's own name as Celery names
    # its message; a Beat firing's: the id its body's self.request.id has, under the entry.
    assert alone == [
        ([1], "call-7", "proj.add"),
        ([2], run_task_id("nightly", "beat:2026-12-05T00:00:00Z", 2), "nightly"),
    ]
    # Sent again by the pump, the same ids: one task across the run's hints.
    assert identities([routed, fired], batch_max=4, hint_options={}) == alone


def test_a_batch_of_runs_is_a_message_of_its_own_id() -> None:
    runs = [DispatchHint(i, "task:proj.add", "q", "task", payload={"task": "proj.add"},
                         trigger_key=f"key:call-{i}") for i in (1, 2, 3)]  # fmt: skip
    batch, alone = sorted(identities(runs, batch_max=2, hint_options={}), key=lambda m: -len(m[0]))
    assert (batch[0], alone[:2]) == ([1, 3], ([2], "call-2"))
    assert batch[1] not in {"call-1", "call-2", "call-3"} and batch[2] == "proj.add"


def test_an_enqueued_batch_is_one_message_a_worker_splits() -> None:
    # enqueue_many's hints: a deep queue's go as one message (one publish for the caller),
    # which the worker that takes it splits (split_hint); a shallow queue's still alone.
    deep = [hint(i) for i in range(1, 11)]
    shallow = [hint(i, queue="other") for i in (20, 21)]
    messages = published(deep + shallow, batch_max=4, hint_options={}, split_by_worker=True)
    assert messages == [("other", [20], "j"), ("other", [21], "j"), ("q", list(range(1, 11)), "j")]


def test_a_batchs_message_shows_its_ids_as_celery_would() -> None:
    # Monitors (Flower, task-sent events) read a message's argsrepr: a batch's is Celery's
    # own saferepr of its ids, cut at 1024 characters, however many ids it carries.
    app = Celery("pump-test", broker="memory://")
    for count in (2, 300, 5000):
        ids = list(range(10**9, 10**9 + count))
        with app.producer_or_acquire() as producer:
            publish_hints(app, producer, [hint(i) for i in ids], batch_max=1, hint_options={},
                          split_by_worker=True)  # fmt: skip
        with app.connection_for_read() as conn, conn.SimpleQueue("q") as inbox:
            message = inbox.get(timeout=1)
            message.ack()
        assert message.payload[0] == ids
        assert message.headers["argsrepr"] == saferepr(ids, 1024)


@pytest.mark.parametrize(
    ("count", "batch_max", "kept", "pieces"),
    [
        (10, 4, 4, [3, 3]),  # three shares of at most 4: this process's, two messages
        (16, 16, 16, []),  # not above batch_max: all kept, nothing sent
        (17, 16, 9, [8]),
        (500, 16, 16, [31] * 4 + [30] * 12),  # at most 16 messages, each split again
        (30, 16, 15, [15]),
        (5, 1, 1, [1, 1, 1, 1]),
    ],
)
def test_a_worker_keeps_one_share_and_passes_the_rest_on(
    count: int, batch_max: int, kept: int, pieces: list[int]
) -> None:
    ids = list(range(1, count + 1))
    own, rest = worker_shares(ids, batch_max)
    assert (len(own), [len(piece) for piece in rest]) == (kept, pieces)
    assert own + [i for piece in rest for i in piece] == ids  # each id once, in order


def test_a_split_hint_passes_its_rest_on_with_its_priority_and_name() -> None:
    app = Celery("pump-test", broker="memory://")
    own = split_hint(app, list(range(1, 11)), batch_max=4, queue="q", priority=7, shadow="j")
    assert own == [1, 2, 3, 4]
    found = []
    with app.connection_for_read() as conn, conn.SimpleQueue("q") as inbox:
        while inbox.qsize():
            message = inbox.get(timeout=1)
            found.append(
                (message.payload[0], message.properties["priority"], message.headers["shadow"])
            )
            message.ack()
    assert found == [([5, 6, 7], 7, "j"), ([8, 9, 10], 7, "j")]
