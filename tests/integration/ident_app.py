"""An own app whose monitors record what Celery's signals, events and worker state show of a
call, for tests/integration/test_task_identity.py (issue 40: a routed call seen as its task).

Run as stock Celery by default; with ``IDENT_KERNEL`` set, ``install(app)`` puts it on the
kernel and routes ``ident.add`` through it. What the publishing and receiving signals saw
goes to ``IDENT_LEDGER``; ``celery inspect ident_successful`` answers the worker's
``successful_requests``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Celery, signals
from celery.worker import state as worker_state
from celery.worker.control import inspect_command

QUEUE = os.environ["IDENT_QUEUE"]  # each side of a test has its own

app = Celery("ident")
app.conf.result_backend = app.conf.broker_url = os.environ["IDENT_BROKER"]
app.conf.task_default_queue = QUEUE
app.conf.task_send_sent_event = True
# Failures stored even for tasks that ignore results: the kernel's hint ignores its own.
app.conf.task_store_errors_even_if_ignored = True
if os.environ.get("IDENT_KERNEL"):
    from celery_app import install

    app.conf.kernel_route_tasks = ["ident.*"]
    install(app)


def note(**fields: Any) -> None:
    with open(os.environ["IDENT_LEDGER"], "a") as ledger:
        ledger.write(json.dumps(fields, default=repr) + "\n")


def _published(signal: str, sender: Any, headers: Any) -> None:
    headers = headers or {}
    note(signal=signal, sender=sender, id=headers.get("id"), name=headers.get("shadow"))


@signals.before_task_publish.connect(weak=False)
def before_publish(sender: Any = None, headers: Any = None, **_: Any) -> None:
    _published("before_task_publish", sender, headers)


@signals.after_task_publish.connect(weak=False)
def after_publish(sender: Any = None, headers: Any = None, **_: Any) -> None:
    _published("after_task_publish", sender, headers)


@signals.task_received.connect(weak=False)
def received(request: Any = None, **_: Any) -> None:
    note(signal="task_received", id=request.id, name=request.name)


@inspect_command()
def ident_successful(state: Any) -> list[str]:
    """The ids the worker counts as succeeded (Celery's ``worker_state``)."""
    return sorted(worker_state.successful_requests)


@app.task(name="ident.add", bind=True)
def add(self: Any, x: int, y: int) -> int:
    note(ran=self.request.id)
    return x + y


# A short lease: a killed run's lease expires within seconds (the kernel's; Celery ignores it).
@app.task(name="ident.slow", bind=True, kernel_options={"lease": "5s"})
def slow(self: Any) -> None:
    note(started=self.request.id)
    time.sleep(60)


@app.task(name="ident.boom")
def boom() -> None:
    raise ValueError("boom")


@app.task(name="ident.flaky", bind=True, max_retries=1)
def flaky(self: Any) -> str:
    if not self.request.retries:
        raise self.retry(countdown=1)
    return "ok"
