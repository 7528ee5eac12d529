"""The hint a single ``enqueue()`` publishes, field by field, as monitors and the broker see
it (issue 42 item 2): a cheaper publish path must send the same message.

Three enqueues (plain with kwargs; keyed with a priority and the call's own reprs; stamped)
are captured on a real Redis through Celery's ``before_task_publish`` and
``after_task_publish`` signals, the raw message left in the queue's list and the
``task-sent`` event on the events exchange, and compared with what the publish sends
today. Only what differs between processes and calls is left out: the delivery tag, the
event's clock and timestamp; the origin, the reply-to and the event's host are this
process's.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.signals import after_task_publish, before_task_publish
from celery.utils.nodenames import anon_nodename

from celery_app import enqueue
from celery_app.factory import create_app

#: How a run's task id is derived when its enqueue gave no key (celery_app/hints.py).
_RUN_IDS = uuid.UUID("5f0c5bd4-3a53-4c55-9d43-0f9b1e2b2a10")
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def _add(x: int, y: int = 0) -> int:
    return x + y


@pytest.fixture
def captured(tmp_path: Path, redis_url: str) -> Iterator[dict[str, Any]]:
    """Three enqueues' hints: the signals' arguments, the queue's raw messages, the events."""
    queue = f"hintmsg-{uuid.uuid4().hex[:12]}"  # the session's Redis is shared
    app = create_app(
        "hintmsg",
        broker_url=redis_url,
        kernel_database_url=f"sqlite:///{tmp_path / 'kernel.db'}",
        kernel_auto_migrate=True,
        task_send_sent_event=True,
        task_routes={"hintmsg.*": {"queue": queue}},
    )

    app.task(name="hintmsg.add")(_add)
    signals: list[tuple[str, dict[str, Any]]] = []

    def before(**kw: Any) -> None:
        signals.append(("before", kw))

    def after(**kw: Any) -> None:
        signals.append(("after", kw))

    client = redis.Redis.from_url(redis_url)
    events = client.pubsub()
    events.psubscribe("*celeryev/task.sent")
    events.get_message(timeout=2)  # the subscription's answer
    before_task_publish.connect(before, weak=False)
    after_task_publish.connect(after, weak=False)
    try:
        made = [
            enqueue(app, "hintmsg.add", [1], {"y": 2}),
            enqueue(
                app,
                "hintmsg.add",
                [3],
                key="hint-k1",
                priority=200,
                request={"argsrepr": "(secret)", "kwargsrepr": "{}"},
            ),
            enqueue(
                app,
                "hintmsg.add",
                [4],
                request={"stamped_headers": ["mark"], "stamps": {"mark": "m1"}},
            ),
        ]
        sent = []
        deadline = time.monotonic() + 10
        while len(sent) < len(made) and time.monotonic() < deadline:
            message = events.get_message(timeout=0.5)
            if message is not None and message["type"] == "pmessage":
                sent.append(json.loads(message["data"]))
        raw = [json.loads(item) for item in reversed(client.lrange(queue, 0, -1))]
        yield {
            "app": app,
            "queue": queue,
            "made": made,
            "signals": signals,
            "raw": raw,
            "sent": sent,
        }
    finally:
        before_task_publish.disconnect(before)
        after_task_publish.disconnect(after)
        events.close()
        client.delete(queue)
        app._kernel_enqueue_client.kernel.close()


def _ids(made: list[Any]) -> list[str]:
    first, keyed, stamped = made
    derived = [
        str(uuid.uuid5(_RUN_IDS, f"{m.job_id}\n{m.trigger_key}\n{m.occurrence_id}"))
        for m in (first, stamped)
    ]
    return [derived[0], "hint-k1", derived[1]]


def _headers(task_id: str, argsrepr: str, kwargsrepr: str, stamps: dict[str, Any]) -> Any:
    return {
        "lang": "py",
        "task": "kernel.run_occurrence",
        "id": task_id,
        "shadow": "hintmsg.add",
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": argsrepr,
        "kwargsrepr": kwargsrepr,
        "origin": anon_nodename(),
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": list(stamps) or None,
        "stamps": stamps,
    }


_REPRS = [("[1]", "{'y': 2}"), ("(secret)", "{}"), ("[4]", "{}")]
_STAMPS: list[dict[str, Any]] = [{}, {}, {"mark": "m1"}]


def test_the_publish_signals_see_todays_hint(captured: dict[str, Any]) -> None:
    app, queue, made = captured["app"], captured["queue"], captured["made"]
    ids = _ids(made)
    assert [kind for kind, _ in captured["signals"]] == ["before", "after"] * 3
    for index, m in enumerate(made):
        (_, before), (_, after) = captured["signals"][2 * index : 2 * index + 2]
        headers = _headers(ids[index], *_REPRS[index], _STAMPS[index])
        body = ([m.occurrence_id], {}, _EMBED)
        declared = before.pop("declare")
        assert [(q.name, q.exchange.name, q.routing_key) for q in declared] == [
            (queue, queue, queue)
        ]
        before.pop("signal")
        assert before == {
            "sender": "kernel.run_occurrence",
            "body": body,
            "exchange": "",
            "routing_key": queue,
            "headers": headers,
            "properties": {
                "correlation_id": ids[index],
                "reply_to": app.thread_oid,
                "argsrepr": _REPRS[index][0],
                "kwargsrepr": _REPRS[index][1],
                "priority": 0 if index == 1 else None,
            },
            "retry_policy": {
                "max_retries": 3,
                "interval_start": 0,
                "interval_max": 1,
                "interval_step": 0.2,
            },
        }
        after.pop("signal")
        assert after == {
            "sender": "kernel.run_occurrence",
            "body": body,
            "headers": headers,
            "exchange": "",
            "routing_key": queue,
        }


def test_the_broker_holds_todays_hint(captured: dict[str, Any]) -> None:
    app, queue, made = captured["app"], captured["queue"], captured["made"]
    ids = _ids(made)
    assert len(captured["raw"]) == 3
    for index, (m, raw) in enumerate(zip(made, captured["raw"], strict=True)):
        body = json.loads(base64.b64decode(raw.pop("body")))
        assert body == [[m.occurrence_id], {}, _EMBED]
        assert raw["properties"].pop("delivery_tag")
        assert raw == {
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": _headers(ids[index], *_REPRS[index], _STAMPS[index]),
            "properties": {
                "correlation_id": ids[index],
                "reply_to": app.thread_oid,
                "argsrepr": _REPRS[index][0],
                "kwargsrepr": _REPRS[index][1],
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
            },
        }


def test_the_task_sent_event_is_todays(captured: dict[str, Any]) -> None:
    queue, made = captured["queue"], captured["made"]
    ids = _ids(made)
    assert len(captured["sent"]) == 3
    clocks = []
    for index, event in enumerate(captured["sent"]):
        body = json.loads(base64.b64decode(event.pop("body")))
        assert event["properties"].pop("delivery_tag")
        assert event == {
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"hostname": anon_nodename()},
            "properties": {
                "delivery_mode": 1,
                "delivery_info": {"exchange": "celeryev", "routing_key": "task.sent"},
                "priority": 0,
                "body_encoding": "base64",
            },
        }
        clocks.append(body.pop("clock"))
        assert isinstance(body.pop("timestamp"), float)
        assert isinstance(body.pop("utcoffset"), int | float)
        assert body == {
            "hostname": anon_nodename(),
            "pid": os.getpid(),
            "uuid": ids[index],
            "root_id": ids[index],
            "parent_id": None,
            "name": "kernel.run_occurrence",
            "args": _REPRS[index][0],
            "kwargs": _REPRS[index][1],
            "retries": 0,
            "eta": None,
            "expires": None,
            "queue": queue,
            "exchange": "",
            "routing_key": queue,
            "type": "task-sent",
        }
    assert clocks == sorted(clocks)
