"""``kernel.run_occurrence``: claim through the kernel, run the adapter, settle. Thin on purpose."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from celery.exceptions import Retry
from kombu.exceptions import OperationalError

from celery_app import notify, run_events
from celery_app.hints import resend_run_hints, split_hint
from celery_app.runtime import RunOutcome, run_occurrences
from celery_app.task_names import RUN_OCCURRENCE
from celery_app.task_results import store_chord_failure
from celery_app.worker_process import process_resources
from kernel import Claim, Kernel, StorageUnavailable

__all__ = ["register", "OccurrenceFailed"]

log = logging.getLogger("celery_kernel.worker")

#: A claim's blocker that passes at a known time -> the outcome of a hint sent again then.
_DUE_LATER = {"rate_limited": "rate_limited", "not_before": "rehinted"}


class OccurrenceFailed(Exception):
    """The run failed and the kernel recorded it (``retry_wait`` or ``dead_letter``).

    Raised only so that Celery's task state, its events and Flower say FAILURE; the
    kernel, not Celery, owns the retry. Listed in the task's ``throws``, so the
    worker logs it in one line at INFO instead of a traceback at ERROR.
    """


def register(celery_app: Any) -> Any:
    """Register ``kernel.run_occurrence`` with ``celery_app``; returns the task."""
    run_events.connect(RUN_OCCURRENCE)
    return celery_app.task(
        name=RUN_OCCURRENCE,
        bind=True,
        # Its own settings, whatever the app's task_* defaults: results live in the
        # kernel, a hint lost with its worker is re-published by the pump, and a hint is
        # ids only (JSON). A hint of one run has the run's task id: the hint's own failure
        # must never be stored over what the run stored under it.
        ignore_result=True,
        store_errors_even_if_ignored=False,
        acks_late=False,
        serializer="json",
        throws=(OccurrenceFailed,),
        Request="celery_app.task_events:NamedEventsRequest",  # Flower names in-flight runs
    )(run_occurrence)


def run_occurrence(task: Any, *occurrence_ids: int) -> Any:
    """Run each of the hinted occurrences the kernel lets this worker claim, in turn.

    A hint carries one occurrence id, or several of one queue when its backlog is deep
    (the pump's batches, an ``enqueue_many``'s: one hint above ``kernel_batch_max`` ids
    is split here first, the ids after this process's share published again, ``rehinted``
    in the answer). Returns what happened to each (``succeeded``, ``handed_back``,
    ``cancelled``, ``lease_lost``, ``not_claimable``, ``rehinted``, ``rate_limited``,
    ``storage_unavailable``): a list for several ids; for one, what its run returned
    when it succeeded (so Celery's log line and Flower show a task's real result), else
    the string.

    The kernel being unreachable (a database restart) is an outage to ride out, not
    a bug: it is logged in one line and ends the batch. The kernel's own recovery covers
    what the failed call did not record: a claim is retried when the hint is sent again;
    a run whose settle did not land is decided by its lease's expiry.

    Raises:
        OccurrenceFailed: a run failed (after the batch's other runs); the message names
            the job, the error code and the kernel status of each failure.
        Retry: the hint's one run failed and the kernel retries it (its OccurrenceFailed
            the reason), so Celery shows the run's task retried, not failed.
    """
    ids = [int(occurrence_id) for occurrence_id in occurrence_ids]
    results: list[str] = []
    value: Any = None  # what the last run returned, when it succeeded
    failures: list[str] = []
    claims: dict[int, Claim] = {}  # each run's claim, for its job's notify
    passed_on = 0
    try:
        resources = process_resources(task.app)
        if len(ids) > resources.batch_max:
            own = _split(task, ids, resources.batch_max)
            ids, passed_on = own, len(ids) - len(own)
        with run_events.run_events(task) as events:

            def started(claim: Claim) -> None:
                claims[claim.occurrence.id] = claim
                if events is not None:
                    events.started(claim)

            for outcome in run_occurrences(
                resources.kernel,
                resources.adapters,
                ids,
                main_pid=resources.main_pid,
                keeper=resources.keeper,
                owner=resources.owner,
                on_start=started,
                scope=resources.scope,
                rehint=lambda rest, per_message: _rehint(task, rest, per_message),
            ):
                occurrence_id = ids[len(results)]
                if outcome.result == "not_claimable":
                    notify.hint_after_refused_claim(task.app, resources.kernel, occurrence_id)
                    outcome = _hint_when_due(task, resources.kernel, occurrence_id, outcome)
                results.append(outcome.result)
                value = outcome.value
                if events is not None:
                    events.ended(occurrence_id, outcome)
                if outcome.status == "dead_letter":  # other ends: the owed row's delivery
                    store_chord_failure(
                        task.app, resources.kernel, occurrence_id, str(outcome.error_code)
                    )
                if outcome.error_code is not None:
                    failures.append(outcome.failure(occurrence_id))
                    if occurrence_id in claims and outcome.status is not None:
                        notify.hint_run(
                            task.app, resources.kernel, claims[occurrence_id], outcome.status
                        )
    except StorageUnavailable as exc:
        occurrence_id = ids[len(results)]
        log.warning(
            "occurrence %s: %s; a claim is retried when its hint is sent again, a run whose "
            "settle did not land is decided by its lease's expiry",
            occurrence_id,
            exc,
            extra={"action": "storage_unavailable", "occurrence_id": occurrence_id},
        )
        results.append("storage_unavailable")
    if failures:
        failed = OccurrenceFailed("; ".join(failures))
        if len(ids) == 1 and results == ["retry_wait"]:
            # Its run's task, as Celery's retried task: task-retried to monitors (RETRY in
            # Flower) until the pump's next hint of it. Raised, a Retry sends nothing.
            raise Retry(str(failed), exc=failed)
        raise failed
    if len(ids) > 1 or passed_on:
        return results + ["rehinted"] * passed_on
    return value if results[0] == "succeeded" else results[0]


def _split(task: Any, occurrence_ids: list[int], batch_max: int) -> list[int]:
    """The share of a hint above ``batch_max`` this process runs, the rest passed on to
    the queue the hint came from (all of it kept when the broker is down: the pump hints
    what this process does not reach, as for a killed worker)."""
    delivery = task.request.delivery_info or {}
    if delivery.get("routing_key") is None:  # called, not delivered: no queue to share with
        return occurrence_ids
    try:
        own = split_hint(
            task.app,
            occurrence_ids,
            batch_max=batch_max,
            queue=delivery["routing_key"],
            priority=delivery.get("priority"),
            shadow=task.request.shadow,
        )
    except OperationalError as exc:
        log.warning(
            "broker unavailable, a hint of %d occurrences not split (%s): this process "
            "runs them in turn",
            len(occurrence_ids),
            exc,
            extra={"action": "hint_split_failed", "occurrence_ids": occurrence_ids},
        )
        return occurrence_ids
    log.info(
        "hint of %d occurrences split: %d run here, the rest sent again to %s",
        len(occurrence_ids),
        len(own),
        delivery["routing_key"],
        extra={"action": "hint_split", "occurrence_ids": own},
    )
    return own


def _rehint(task: Any, occurrence_ids: list[int], per_message: int) -> None:
    """Send a batch's unstarted ids to the queue its message came from, ``per_message``
    a message, under the batch's name (so Flower still shows the job)."""
    queue = task.request.delivery_info["routing_key"]
    log.info(
        "batch runs long: %d occurrences sent again to %s, %d a message",
        len(occurrence_ids),
        queue,
        per_message,
        extra={"action": "batch_rehinted", "occurrence_ids": occurrence_ids},
    )
    try:
        resend_run_hints(
            task.app,
            occurrence_ids,
            queue=queue,
            shadow=task.request.shadow,
            per_message=per_message,
        )
    except OperationalError as exc:  # the broker is down: the ids stay queued
        log.warning(
            "broker unavailable, a long batch's rest not all sent again (%s); the pump "
            "hints it again after kernel_rehint_after",
            exc,
            extra={"action": "batch_rehint_failed", "occurrence_ids": occurrence_ids},
        )


def _hint_when_due(task: Any, kernel: Kernel, occurrence_id: int, refused: RunOutcome) -> Any:
    """A hint refused because its run's rate limit has no token yet (``rate_limited``), or
    because it came before the run's countdown/eta, the worker's clock ahead of the
    database's (``rehinted``), is sent again, to be delivered then: delayed, never dropped,
    as under Celery. Any other refusal stands (``refused``)."""
    blocker = kernel.blocker(occurrence_id)
    if blocker is None or blocker.kind not in _DUE_LATER or blocker.not_before is None:
        return refused
    wait = (datetime.fromisoformat(blocker.not_before) - datetime.now(UTC)).total_seconds()
    log.info(
        "occurrence %s: %s; hint sent again for then",
        occurrence_id,
        blocker.text,
        extra={"action": blocker.kind, "occurrence_id": occurrence_id},
    )
    queue = task.request.delivery_info["routing_key"]
    # A hint of this run alone had the run's task id and stamps: its hint sent again
    # keeps them.
    alone = len(task.request.args or ()) == 1
    stamps = {"stamped_headers": task.request.stamped_headers, "stamps": task.request.stamps}
    try:
        resend_run_hints(
            task.app,
            [occurrence_id],
            queue=queue,
            shadow=task.request.shadow,
            per_message=1,
            countdown=max(wait, 0.0),
            task_id=task.request.id if alone else None,
            stamps=stamps if alone else None,
        )
    except OperationalError as exc:  # the broker is down: the pump hints it when due
        log.warning(
            "broker unavailable, occurrence %s (%s) not sent again (%s); the pump hints it "
            "when it may start",
            occurrence_id,
            blocker.kind,
            exc,
            extra={"action": f"{blocker.kind}_rehint_failed", "occurrence_id": occurrence_id},
        )
    return RunOutcome(_DUE_LATER[blocker.kind])
