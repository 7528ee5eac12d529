"""Celery's revoke of a routed call, carried out by the kernel.

A routed call's ``AsyncResult`` has the run's key as its id, which a worker holds as a
message id only while the run's own hint waits or runs (a batch of runs is one message of
its own id; a run held back is not hinted yet): Celery's revoke alone would leave the run
in the kernel, to be hinted again or reclaimed. Every way Celery revokes
(``AsyncResult.revoke()``, ``app.control.revoke``, ``revoke_by_stamped_headers``, Flower's
button, ``celery control revoke ID`` — which broadcasts by itself, past
``Control.revoke``) ends as a broadcast to the workers' ``revoke`` /
``revoke_by_stamped_headers`` control commands, whoever sent it and whatever app it used.
So :func:`hook_revoke` (called by ``install(app)``) wraps those two commands: a worker of
an app the kernel is installed on has the kernel cancel the routed runs named
(:meth:`kernel.Kernel.revoke`): one not started never runs and its result is REVOKED; a
running one is asked to stop with ``terminate``, else it finishes, as under Celery. The
cancel is durable (it holds across restarts, for every worker) and guarded, so each worker
of the broadcast may carry it out and one moves the run. Then Celery's own command takes
every id and stamp as ever: a hint of one run carries its run's task id, so Celery's
worker discards it when it comes and, with ``terminate``, signals the process running it.

A kernel that cannot be reached (the database away) is tried again in a thread of its
own, so the worker's consumer is not held, with :data:`RETRY_DELAYS_S` between tries; a
revoke still refused after them is logged as an error naming the task ids and what the
operator runs, since the routed runs go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from celery.utils.collections import AttributeDict
from celery.utils.functional import maybe_list
from celery.worker import state as worker_state
from celery.worker.control import Panel, ok

from celery_app.enqueueing import process_kernel
from celery_app.notify import hint_owed
from kernel import KernelError, Revoked, StorageUnavailable, caller_key, carries_stamps

__all__ = ["RETRY_DELAYS_S", "hook_revoke", "revoke_remembered_stamps"]

#: Seconds between the tries of a kernel revoke refused for an unreachable database:
#: about 15 s in all, past a PostgreSQL restart or a failover's switch.
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)

Revoke = Callable[[Any, str], list[Revoked]]

log = logging.getLogger("celery_kernel.revoke")

_hook_lock = threading.Lock()


def hook_revoke() -> None:
    """Wrap the worker's ``revoke`` and ``revoke_by_stamped_headers`` control commands
    (see the module docstring). Idempotent."""
    with _hook_lock:
        if getattr(Panel.data["revoke"], "_kernel", False):
            return
        Panel.data["revoke"] = _by_id(Panel.data["revoke"])
        Panel.data["revoke_by_stamped_headers"] = _by_stamps(
            Panel.data["revoke_by_stamped_headers"]
        )


def _by_id(celerys: Callable[..., Any]) -> Callable[..., Any]:
    def revoke(
        state: Any, task_id: Any, terminate: bool = False, signal: Any = None, **kwargs: Any
    ) -> Any:
        ids = [str(one) for one in maybe_list(task_id) or ()]
        # The kernel first: a run not started is cancelled, a running one asked to stop
        # (terminate), so neither a later hint nor its lease's expiry runs it again. Then
        # Celery's own for every id: a hint of one run has its run's task id, which
        # Celery's worker discards when it comes, or whose process it signals.
        what = f"revoke of task {', '.join(ids)}"
        found = _carry_out(
            state,
            lambda kernel, who: kernel.revoke(ids, terminate=bool(terminate), operator=who),
            what,
        )
        answer = celerys(state, ids, terminate=terminate, signal=signal, **kwargs)
        if found is None:  # the kernel did not answer: say so
            return {"error": f"{what}: the kernel did not take it (see the worker's log)"}
        return _merged(answer, _answer(found))

    revoke._kernel = True  # type: ignore[attr-defined]
    return revoke


def _by_stamps(celerys: Callable[..., Any]) -> Callable[..., Any]:
    def revoke_by_stamped_headers(
        state: Any, headers: Any, terminate: bool = False, signal: Any = None, **kwargs: Any
    ) -> Any:
        answer = celerys(state, headers, terminate=terminate, signal=signal, **kwargs)
        if isinstance(headers, list):  # Celery's "name=value" form
            headers = dict(header.split("=", 1) for header in headers)
        what = f"revoke of the runs stamped {headers}"
        found = _carry_out(
            state,
            lambda kernel, who: kernel.revoke_stamped(
                headers, terminate=bool(terminate), operator=who
            ),
            what,
        )
        if found is None:
            return {"error": f"{what}: the kernel did not take it (see the worker's log)"}
        return _merged(answer, _answer(found))

    return revoke_by_stamped_headers


def _merged(celerys: Any, kernels: dict[str, str] | None) -> Any:
    """One reply of Celery's answer about the other ids and the kernel's about the routed
    runs (an error wins)."""
    if kernels is None:
        return celerys
    if celerys is None or "error" in kernels:
        return kernels
    return ok(f"{celerys.get('ok', celerys)}; {kernels['ok']}")


def _answer(found: Sequence[Revoked]) -> dict[str, str] | None:
    """The reply about the routed runs a revoke named (None: it named none)."""
    return ok(f"routed runs {_listed(found)}") if found else None


def revoke_remembered_stamps(app: Any, hostname: str, occurrence_ids: Sequence[int]) -> None:
    """Before a hint of ``occurrence_ids`` runs: those of its routed runs that carry a stamp
    this worker remembers revoked (Celery's ``revoked_stamps``, kept from
    ``revoke_by_stamped_headers`` for the messages it receives later) are cancelled, so the
    hint's claim of one refuses it as Celery's worker discards such a message. Reads only
    the hint's runs, and nothing while no stamp is remembered."""
    if not worker_state.revoked_stamps:
        return
    stamps = dict(worker_state.revoked_stamps)
    try:
        kernel = process_kernel(app)
        runs = [kernel.get_occurrence(int(occurrence_id)) for occurrence_id in occurrence_ids]
    except KernelError as exc:  # its claim answers for the run (gone, or the kernel down)
        log.warning("revoked stamps not checked: %s", exc, extra={"action": "revoke_failed"})
        return
    task_ids = [
        key
        for run in runs
        if (key := caller_key(run.trigger_key)) is not None
        and carries_stamps(run.definition, stamps)
    ]
    if task_ids:
        _carry_out(
            AttributeDict(app=app, hostname=hostname),
            lambda kernel, who: kernel.revoke(task_ids, terminate=False, operator=who),
            f"revoke of task {', '.join(task_ids)} (a stamp revoked)",
        )


def _carry_out(state: Any, revoke: Revoke, what: str) -> list[Revoked] | None:
    """The routed runs ``revoke(kernel, operator)`` named, their owed ends hinted; [] where
    the kernel is not installed; None when the kernel refused: tried again in a thread
    while the database is away, else logged."""
    app = state.app
    if not getattr(app, "_kernel_installed", False):
        return []
    who = f"celery-revoke@{state.hostname}"
    try:  # opening the process's kernel may meet the database away too
        found = revoke(process_kernel(app), who)
    except StorageUnavailable as exc:
        log.warning(
            "%s: the kernel is unreachable (%s); tried again for up to %g s",
            what,
            exc,
            sum(RETRY_DELAYS_S),
            extra={"action": "revoke_retrying"},
        )
        threading.Thread(
            target=_retried,
            args=(app, revoke, who, what),
            name="kernel-revoke",
            daemon=True,
        ).start()
        return None
    except KernelError as exc:
        _given_up(app, what, exc)
        return None
    _moved(app, found)
    return found


def _retried(app: Any, revoke: Revoke, who: str, what: str) -> None:
    """``revoke`` tried again after each of :data:`RETRY_DELAYS_S` while the database is
    away; given up (logged) after the last, or at once on any other refusal."""
    for delay in RETRY_DELAYS_S:
        time.sleep(delay)
        try:
            found = revoke(process_kernel(app), who)
        except StorageUnavailable as exc:
            last: KernelError = exc
            continue
        except KernelError as exc:
            last = exc
            break
        log.info("%s carried out by the kernel after a retry", what, extra={"action": "revoked"})
        _moved(app, found)
        return
    _given_up(app, what, last)


def _given_up(app: Any, what: str, exc: KernelError) -> None:
    log.error(
        "%s was not carried out by the kernel (%s: %s): its routed runs go on. Once the "
        "kernel answers, send the revoke again, or cancel each run's occurrence: "
        "celery -A %s kernel cancel OCC",
        what,
        exc.code,
        exc,
        app.main or "APP",
        extra={"action": "revoke_failed"},
    )


def _moved(app: Any, found: Sequence[Revoked]) -> None:
    """Log the runs a revoke moved and hint the owed ends of those it cancelled."""
    moved = [run for run in found if run.moved]
    for run in moved:
        log.info(
            "routed run %s (occurrence %s) revoked: %s",
            run.task_id,
            run.occurrence_id,
            "cancelled" if run.status == "cancelled" else "asked to stop",
            extra={"action": "revoked", "occurrence_id": run.occurrence_id},
        )
    hint_owed(app, process_kernel(app), [run for run in moved if run.status == "cancelled"])


def _listed(runs: Sequence[Revoked]) -> str:
    return ", ".join(f"{run.task_id} ({run.status})" for run in runs)
