"""An own app (not ``celery_app``) whose tasks record what they saw, for the Celery
option proofs (tests/integration/test_celery_options.py, issue 38 item 7).

Run as stock Celery by default; with ``OPTS_KERNEL`` set, ``install(app)`` puts it on
the kernel and routes its tasks through it (``kernel_route_tasks``). The same calls with
the same options are then compared by what the tasks wrote to ``OPTS_LEDGER``.
"""

from __future__ import annotations

import json
import os
import time

from celery import Celery
from celery.app.task import get_actual_ignore_result
from celery.exceptions import SoftTimeLimitExceeded

QUEUE = os.environ["OPTS_QUEUE"]  # each side of a test has its own

app = Celery("opts")
# Where results go, when a test reads them (both sides: the ids are uuids).
app.conf.result_backend = os.environ.get("OPTS_BACKEND")
# Read by Celery on AMQP only: the queue is declared as a priority queue (0-9).
app.conf.task_queue_max_priority = 10
# opts.routed has no queue of its own: task_routes (a glob) sends it to the side's queue.
app.conf.task_routes = {"opts.rout*": {"queue": QUEUE}}
if os.environ.get("OPTS_KERNEL"):
    from celery_app import install

    app.conf.kernel_route_tasks = [
        "opts.record", "opts.soft", "opts.hard", "opts.routed", "opts.request",
        "opts.retry_once", "opts.steps", "opts.fails",
    ]  # fmt: skip
    install(app)


def note(**fields: object) -> None:
    """One line of the ledger; ``at`` is the wall clock the test compares with the call's."""
    with open(os.environ["OPTS_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({**fields, "at": time.time()}) + "\n")


@app.task(name="opts.record", queue=QUEUE)
def record(tag: str) -> str:
    note(task="record", tag=tag)
    return tag


@app.task(name="opts.soft", max_retries=0, queue=QUEUE)
def soft(tag: str) -> str:
    note(task="soft", tag=tag, event="started")
    try:
        time.sleep(60)
    except SoftTimeLimitExceeded:
        note(task="soft", tag=tag, event="SoftTimeLimitExceeded")
        return "stopped in time"
    note(task="soft", tag=tag, event="finished")
    return "ran to the end"


@app.task(name="opts.hard", max_retries=0, queue=QUEUE)
def hard(tag: str) -> str:
    note(task="hard", tag=tag, event="started")
    time.sleep(60)
    note(task="hard", tag=tag, event="finished")
    return "ran to the end"


@app.task(name="opts.routed")
def routed(tag: str) -> str:
    note(task="routed", tag=tag)
    return tag


@app.task(name="opts.request", bind=True, queue=QUEUE, time_limit=60, soft_time_limit=45)
def request(self: object, tag: str) -> str:
    """What the call gave the body's request: headers, properties, limits, stamps."""
    seen = self.request  # type: ignore[attr-defined]
    note(
        task="request",
        tag=tag,
        headers=seen.headers,
        tenant=getattr(seen, "tenant", None),
        app_id=(seen.properties or {}).get("app_id"),
        time_limit=seen.time_limit,
        soft_time_limit=seen.soft_time_limit,
        ignore_result=get_actual_ignore_result(self, seen),
        stamped_headers=seen.stamped_headers,
        stamps=seen.stamps,
    )
    return tag


@app.task(name="opts.retry_once", bind=True, queue=QUEUE, max_retries=1)
def retry_once(self: object, tag: str) -> str:
    """Retried once; then what its request still holds of the call."""
    seen = self.request  # type: ignore[attr-defined]
    if not seen.retries:
        raise self.retry(countdown=0)  # type: ignore[attr-defined]
    note(task="retry_once", tag=tag, headers=seen.headers,
         ignore_result=get_actual_ignore_result(self, seen))  # fmt: skip
    return tag


@app.task(name="opts.steps", queue=QUEUE, max_retries=0, kernel_checkpoints=True)
def steps(tag: str) -> str:
    """Runs for a minute in steps, each a point where the kernel may stop it (a cancel)."""
    from celery_app import current_run  # harmless outside a kernel run

    note(task="steps", tag=tag, event="started")
    for _ in range(240):
        current_run.checkpoint()
        time.sleep(0.25)
    note(task="steps", tag=tag, event="finished")
    return "ran to the end"


@app.task(name="opts.fails", queue=QUEUE, max_retries=0)
def fails(tag: str) -> None:
    note(task="fails", tag=tag)
    raise ValueError(tag)


if os.environ.get("OPTS_SIGNALS"):
    # What monitors see of each message, in every process (caller, worker, Beat): the
    # stamps its headers carry when published and its request's when a worker gets it.
    from celery.signals import before_task_publish, task_received

    @before_task_publish.connect(weak=False)
    def _published(headers: dict[str, object], properties: dict[str, object], **_: object) -> None:
        stamped = list(headers.get("stamped_headers") or ())  # type: ignore[call-overload]
        note(signal="published", argsrepr=headers.get("argsrepr"), stamped_headers=stamped,
             stamps=headers.get("stamps"),
             in_properties=sorted({"stamped_headers", *stamped} & set(properties)))  # fmt: skip

    @task_received.connect(weak=False)
    def _received(request: object, **_: object) -> None:
        note(signal="received", argsrepr=request.argsrepr,  # type: ignore[attr-defined]
             stamped_headers=request.stamped_headers,  # type: ignore[attr-defined]
             stamps=request.stamps)  # type: ignore[attr-defined]  # fmt: skip
