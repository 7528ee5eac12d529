"""``kernel.adjudicate_occurrence``: a worker asks an occurrence's adapter about its uncertain run.

An at-most-once run whose lease expired mid-run waits in ``needs_adjudication``. Beat's
pump hints it (:func:`hint_adapter_asks`) to the occurrence's queue, where a worker with
the adapter takes the one live ask (a token with a deadline, fenced in the kernel),
calls the adapter's ``adjudicate`` and brings back the verdict or "cannot tell". A
duplicate hint finds the ask taken and does nothing; a crashed asker's ask expires and
Beat hints it again (at most ``kernel.occurrences.adapter_verdicts.MAX_ASKS`` times), after which,
as after "cannot tell", the operator decides (``kernel adjudicate``).
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import OperationalError

from adapters.base import Adapter, AdjudicationContext, BaseAdapter
from adapters.secrets import scrub
from celery_app.held_run import new_owner
from celery_app.hints import publish_adjudication_hints
from celery_app.task_names import ADJUDICATE_OCCURRENCE
from celery_app.worker_process import process_resources
from kernel import DispatchHint, Kernel, KernelError, StorageUnavailable, Verdict

__all__ = [
    "ASK_WINDOW_S",
    "ANSWER_TIMEOUT_S",
    "register",
    "ask_adapter",
    "hint_adapter_asks",
]

#: Seconds one ask holds; an answer after it is discarded and the question asked again.
ASK_WINDOW_S = 60.0
#: Seconds the adapter is given to answer, well inside the ask's window.
ANSWER_TIMEOUT_S = 30.0

log = logging.getLogger("celery_kernel.adjudication")


def register(celery_app: Any) -> Any:
    """Register ``kernel.adjudicate_occurrence`` with ``celery_app``; returns the task."""
    return celery_app.task(name=ADJUDICATE_OCCURRENCE, bind=True, ignore_result=True)(
        adjudicate_occurrence
    )


def adjudicate_occurrence(task: Any, occurrence_id: int, kind: str) -> str:
    """Ask the adapter of ``kind`` about occurrence ``occurrence_id``; what happened (see
    :func:`ask_adapter`, or ``storage_unavailable``: the ask expires and is hinted again)."""
    try:
        resources = process_resources(task.app)
        return ask_adapter(resources.kernel, resources.adapters, int(occurrence_id), kind)
    except StorageUnavailable as exc:
        log.warning(
            "occurrence %s: %s; the adapter is asked again after the ask expires",
            occurrence_id,
            exc,
            extra={"action": "storage_unavailable", "occurrence_id": occurrence_id},
        )
        return "storage_unavailable"


def ask_adapter(kernel: Kernel, adapters: dict[str, Adapter], occurrence_id: int, kind: str) -> str:
    """Take the ask, ask the adapter, record its answer.

    Returns ``decided`` (the adapter's verdict was applied), ``cannot_tell`` (it could not
    tell), ``not_asked`` (decided, or asked by another worker), ``no_adapter`` (this
    worker has no adapter of ``kind``: left for one that has) or ``refused`` (an
    operator decided first, or the ask expired, while the adapter was asked).
    """
    ids = {"occurrence_id": occurrence_id}
    adapter = adapters.get(kind)
    if adapter is None:
        log.warning(
            "occurrence %s: no adapter of kind %r on this worker to ask; hint dropped",
            occurrence_id,
            kind,
            extra={"action": "adjudication_no_adapter", **ids},
        )
        return "no_adapter"
    asked = kernel.ask_adapter(occurrence_id, asker=new_owner(), window=ASK_WINDOW_S)
    if asked is None:
        log.info(
            "occurrence %s: not to be asked now; hint dropped",
            occurrence_id,
            extra={"action": "adjudication_not_asked", **ids},
        )
        return "not_asked"
    ids["fence"] = asked.occurrence.fence
    logger = logging.LoggerAdapter(log, ids)
    ctx = AdjudicationContext(asked.occurrence, logger, ANSWER_TIMEOUT_S, set())
    verdict, reason = _verdict_of(adapter, ctx)
    try:
        if verdict is None:
            reason = scrub(reason, ctx.secrets)
            kernel.adapter_cannot_tell(occurrence_id, token=asked.token, reason=reason)
            logger.info("%s; an operator decides", reason, extra={"action": "adapter_cannot_tell"})
            return "cannot_tell"
        decided = kernel.adapter_adjudicates(occurrence_id, token=asked.token, verdict=verdict)
    except StorageUnavailable:
        raise
    except KernelError as exc:  # STATE_CONFLICT (an operator first), LEASE_LOST, ...
        logger.warning(
            "the adapter's answer was refused: %s", exc, extra={"action": "adapter_refused"}
        )
        return "refused"
    logger.info(
        "the adapter decided %s: %s",
        verdict.decision.value,
        decided.status.value,
        extra={"action": "adapter_adjudicated"},
    )
    return "decided"


def _verdict_of(adapter: Adapter, ctx: AdjudicationContext) -> tuple[Verdict | None, str]:
    """The adapter's verdict, or None and why it has none."""
    kind = ctx.occurrence.kind
    hook = getattr(adapter, "adjudicate", None)
    if hook is None or getattr(type(adapter), "adjudicate", None) is BaseAdapter.adjudicate:
        return None, f"the {kind} adapter cannot answer unknown outcomes (no adjudicate hook)"
    try:
        verdict: Verdict | None = hook(ctx)
    except Exception as exc:  # adapter code may raise anything: it then cannot tell
        return None, f"the {kind} adapter failed: {type(exc).__name__}: {exc}"
    return verdict, f"the {kind} adapter could not tell"


def hint_adapter_asks(
    app: Any, kernel: Kernel, *, limit: int, rehint_after: float
) -> list[DispatchHint]:
    """Publish one ``kernel.adjudicate_occurrence`` hint per occurrence whose adapter is to
    be asked now (Beat's pump); the hints published. A broker outage is logged: the
    hints go out again after ``rehint_after``."""
    hints = kernel.adapter_asks_due(limit=limit, rehint_after=rehint_after)
    if not hints:
        return hints
    try:
        publish_adjudication_hints(app, hints)
    except OperationalError as exc:
        log.warning(
            "broker unavailable, %d adjudication hint(s) not all published (%s)",
            len(hints),
            exc,
            extra={"action": "adjudication_hints_unavailable"},
        )
        return []
    return hints
