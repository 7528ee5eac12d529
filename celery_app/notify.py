"""``kernel.notify``: a job's ``notify`` of a run's event, delivered by a worker.

The kernel records a notification in the transaction of the change that causes it (a
dead letter, a failed run, a run needing adjudication, a watchdog finding; whoever made
it). The worker that settled the run sends a ``kernel.notify`` hint of those its settle
recorded to the job's queue (:func:`hint_run`); the notifications of changes Beat or a
claim made are hinted by Beat (:func:`rehint_overdue`). A worker takes one try (a
guarded claim, :meth:`Kernel.claim_notification`), so a duplicate hint or a second
worker delivers nothing, and either:

* sends the Celery task ``notify.task`` by name with ``notification=`` the body, to the
  job's queue (delivered once the broker took the message); or
* POSTs the body as JSON to ``notify.http`` through the worker's ``http`` adapter: the
  same URL checks, ``secret_headers`` from the worker's secrets, secrets scrubbed from
  errors, and the deployment's ``kernel_allowed_kinds`` (an http notify where ``http``
  is not allowed is given up as ``NOT_ALLOWED``). The header ``X-Kernel-Notification``
  carries the notification id, for a receiver that deduplicates.

The kernel also owes a routed run's end its worker did not answer for to the app's
result backend (target ``result_backend``): its delivery stores that end under the
caller's task id (:func:`celery_app.task_results.store_end`) and sends nothing else.

A failed try is recorded and hinted again after its backoff (``countdown``) while the
job's ``notify.attempts`` allow, else given up; every step is an event of the run. A
hint that was lost (a broker outage right after the settle), or never sent (a change
Beat or a claim made), is made up by Beat, which hints notifications overdue by
``REHINT_AFTER_S`` once a minute (:func:`rehint_overdue`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kombu.exceptions import OperationalError

from adapters.base import AdapterError, ExecutionContext
from adapters.secrets import scrub
from celery_app.hints import send_notification_hint, send_notification_task
from celery_app.scope import Scope
from celery_app.task_names import NOTIFY
from celery_app.task_results import store_chord_failure, store_end
from celery_app.worker_process import process_resources
from kernel import FAILED, Claim, Kernel, KernelError, Notification, OccurrenceStatus, Revoked

__all__ = [
    "REHINT_AFTER_S",
    "deliver",
    "hint_after_refused_claim",
    "hint_owed",
    "hint_run",
    "register",
    "rehint_overdue",
]

#: Seconds an http notification's request may take.
HTTP_TIMEOUT_S = 30.0
#: Seconds a pending notification may be due before Beat hints it again (its own hint,
#: sent with a countdown, is taken well within this unless it was lost).
REHINT_AFTER_S = 60.0

#: The statuses whose settle may have recorded a notification of its run.
NOTIFYING = (*FAILED, OccurrenceStatus.NEEDS_ADJUDICATION)

log = logging.getLogger("celery_kernel.notify")


def register(celery_app: Any) -> Any:
    """Register ``kernel.notify`` with ``celery_app``; returns the task."""
    return celery_app.task(name=NOTIFY, bind=True, ignore_result=True)(notify_task)


def hint_run(app: Any, kernel: Kernel, claim: Claim, status: str) -> list[int]:
    """Hint the notifications that the settle of the run ``claim`` held (in ``status``)
    recorded with it; their ids: its job's notify of a failure, and a cancelled run's end
    owed to the result backend (its body wrote none).

    Never raises: the run and its notifications are committed whatever becomes of a hint
    (a storage or broker failure is logged; Beat hints a lost one again).
    """
    occurrence = claim.occurrence
    notifying = occurrence.definition.get("notify") and status in NOTIFYING
    if not notifying and status != OccurrenceStatus.CANCELLED:
        return []
    return _hint_of_run(app, kernel, occurrence.id, claim.fence, occurrence.queue)


def hint_owed(app: Any, kernel: Kernel, runs: Sequence[Revoked]) -> None:
    """Hint what the cancels of ``runs`` owe (their ends REVOKED in the result backend),
    now rather than at Beat's next re-hint. Never raises (as :func:`hint_run`)."""
    for run in runs:
        _hint_of_run(app, kernel, run.occurrence_id, run.fence, run.queue)


def hint_after_refused_claim(app: Any, kernel: Kernel, occurrence_id: int) -> None:
    """Hint the pending notifications of ``occurrence_id`` after its claim was refused: a
    claim that finds the run's lease expired settles it as Beat's expiry would, recording
    them with no worker to hint them, and Beat's re-hint of what nobody hinted is a minute
    or two away. Never raises (as :func:`hint_run`)."""
    _hint_of_run(app, kernel, occurrence_id, None, None)


def _hint_of_run(
    app: Any, kernel: Kernel, occurrence_id: int, fence: int | None, queue: str | None
) -> list[int]:
    """Hint the pending notifications of the run (any of its runs without ``fence``) to
    ``queue`` (without: to each one's own)."""
    try:
        made = kernel.run_notifications(occurrence_id, fence)
        for notification in made:
            _hint(app, notification, queue)
        return [notification.id for notification in made]
    except (KernelError, OperationalError) as exc:
        log.warning(
            "occurrence %s: its notifications were not hinted (Beat hints them later): %s",
            occurrence_id,
            exc,
            extra={
                "action": "notify_not_sent",
                "occurrence_id": occurrence_id,
                "fence": fence,
            },
        )
        return []


def _hint(
    app: Any, notification: Notification, queue: str | None = None, countdown: float = 0.0
) -> None:
    """Hint a try of ``notification`` to ``queue``; without, to the queue its run was on when
    it was recorded."""
    own_queue = queue or str(notification.body.get("queue"))
    send_notification_hint(app, notification.id, own_queue, countdown)


def notify_task(task: Any, notification_id: int) -> str:
    """Deliver one try of a notification; what happened (see :func:`deliver`)."""
    resources = process_resources(task.app)
    return deliver(task.app, resources.kernel, resources.adapters, resources.scope, notification_id)


def deliver(
    app: Any, kernel: Kernel, adapters: dict[str, Any], scope: Scope, notification_id: int
) -> str:
    """Take a try of the notification and deliver it.

    Returns:
        ``delivered``; ``retry`` (the try failed and is hinted again after its backoff);
        ``given_up``; or ``not_claimable`` (another worker has it, it is done, or not due).
    """
    taken = kernel.claim_notification(int(notification_id))
    if taken is None:
        return "not_claimable"
    assert taken.token is not None
    body = {**taken.body, "notification_id": taken.id}
    try:
        if taken.target.get("result_backend"):
            ended = kernel.get_occurrence(taken.occurrence_id)
            store_end(app, ended.payload, taken.body, ended.skip_reason)
            code = (taken.body.get("error") or {}).get("code") or taken.body["status"]
            store_chord_failure(app, kernel, taken.occurrence_id, str(code))
        elif "task" in taken.target:
            send_notification_task(app, taken.target["task"], body)
        else:
            _post(kernel, adapters, scope, taken, body)
    except AdapterError as exc:
        return _failed(app, kernel, taken, f"{exc.code}: {exc.message}", exc.retryable)
    except OperationalError as exc:  # the broker did not take the task's message
        return _failed(app, kernel, taken, f"BROKER_UNAVAILABLE: {exc}", True)
    kernel.notification_delivered(taken.id, token=taken.token)
    log.info(
        "notification %s of occurrence %s delivered",
        taken.id,
        taken.occurrence_id,
        extra={"action": "notify_delivered", "occurrence_id": taken.occurrence_id},
    )
    return "delivered"


def _post(
    kernel: Kernel, adapters: dict[str, Any], scope: Scope, taken: Notification, body: Any
) -> None:
    """POST ``body`` to the notification's endpoint through the worker's http adapter."""
    target = taken.target["http"]
    headers = {**target.get("headers", {}), "X-Kernel-Notification": str(taken.id)}
    payload = {**target, "method": "POST", "headers": headers, "json": body}
    refused = scope.refusal("http", payload)
    if refused is not None:
        raise AdapterError("NOT_ALLOWED", refused[1], retryable=False)
    adapter = adapters.get("http")
    if adapter is None:
        raise AdapterError("ADAPTER_UNKNOWN", "no http adapter on this worker", retryable=True)
    occurrence = kernel.get_occurrence(taken.occurrence_id)
    # The run's own identity (Idempotency-Key, X-Kernel-Job) goes with the request.
    definition = {**occurrence.definition, "kind": "http", "payload": payload}
    ctx = ExecutionContext(
        dataclasses.replace(occurrence, definition=definition),
        resumed=None,
        cancelled=threading.Event(),
        on_safe_point=lambda _point, _data: None,
        logger=log,
        timeout_s=HTTP_TIMEOUT_S,
    )
    try:
        adapter.execute(ctx)
    except AdapterError as exc:
        exc.message = scrub(exc.message, ctx.secrets)
        raise


def _failed(app: Any, kernel: Kernel, taken: Notification, error: str, retryable: bool) -> str:
    after = kernel.notification_failed(taken, error=error, retryable=retryable)
    ids = {"occurrence_id": taken.occurrence_id, "notification_id": taken.id}
    if after.state != "pending":
        log.warning(
            "notification %s of occurrence %s given up after %s tries: %s",
            taken.id,
            taken.occurrence_id,
            after.tries,
            error,
            extra={"action": "notify_given_up", **ids},
        )
        return "given_up"
    wait = max((after.next_at - datetime.now(UTC)).total_seconds(), 0.0)
    log.info(
        "notification %s of occurrence %s failed (%s); tried again in %.0fs",
        taken.id,
        taken.occurrence_id,
        error,
        wait,
        extra={"action": "notify_retry", **ids},
    )
    try:
        _hint(app, taken, countdown=wait)
    except OperationalError as exc:
        log.warning(
            "notification %s stays pending: its next try could not be hinted: %s",
            taken.id,
            exc,
            extra={"action": "notify_not_sent", **ids},
        )
    return "retry"


def rehint_overdue(
    app: Any, kernel: Kernel, limit: int = 100, overdue_for: float = REHINT_AFTER_S
) -> int:
    """Hint the pending notifications overdue by ``overdue_for`` seconds (their hints
    were lost, or none was sent); how many. A hint that was only slow is found taken and
    dropped."""
    overdue = kernel.due_notifications(limit, overdue_for=overdue_for)
    for notification in overdue:
        _hint(app, notification)
    if overdue:
        log.info(
            "hinted %d overdue notification(s) again",
            len(overdue),
            extra={"action": "notify_rehinted", "notifications": [n.id for n in overdue]},
        )
    return len(overdue)
