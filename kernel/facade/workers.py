"""The facade's worker side: claim, renew, settle, pause at a safe point, hand back, output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from kernel.facade.base import FacadeBase, _int, _name, lease_ms, ms, run_write, write
from kernel.occurrences import claiming, output, releases, runs
from kernel.records import stored_result
from kernel.states import Effect
from kernel.transaction.tx import Tx
from kernel.types import Claim, RenewAnswer
from kernel.upkeep import watchdog_jobs

#: The most of a failed run's traceback kept with its error (characters).
TRACEBACK_LIMIT = 8000

__all__ = ["WorkerFacade", "WorkerLane"]


class WorkerFacade(FacadeBase):
    @cached_property
    def worker_lane(self) -> WorkerLane:
        """:meth:`claim` and :meth:`succeed` as the Celery runtime calls them once each per run."""
        return WorkerLane(self)

    @write
    def claim(
        self, tx: Tx, occurrence_id: int, *, owner: str, lease: float | None = None
    ) -> Claim | None:
        """Claim one occurrence by id if claimable now (fence + 1); None changes nothing.

        ``lease`` defaults to the job's own lease from the occurrence's snapshot.
        """
        return claiming.claim(tx, occurrence_id, owner, lease_ms(lease))

    @write
    def claim_next(
        self,
        tx: Tx,
        *,
        owner: str,
        lease: float | None = None,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Claim | None:
        """Claim the oldest claimable occurrence (optionally of these queues/kinds)."""
        return claiming.claim_next(
            tx,
            owner,
            lease_ms(lease),
            queues=tuple(queues) if queues else None,
            kinds=tuple(kinds) if kinds else None,
        )

    @write
    def renew(
        self,
        tx: Tx,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        lease: float,
        checkpoint: Any = None,
    ) -> RenewAnswer:
        """Extend the lease, storing ``checkpoint`` (the run's newest progress, ≤ 64 KiB of
        JSON; None: none since the last renewal) with it, fenced. A later claim of the
        occurrence (after a crash, a retry) resumes from it.

        Raises:
            LeaseLost: (owner, fence) no longer holds the lease; nothing is stored.
            InvalidArgument: the checkpoint exceeds 64 KiB.
        """
        return runs.renew(tx, occurrence_id, owner, fence, ms(lease, "lease"), checkpoint)

    @write
    def succeed(
        self, tx: Tx, occurrence_id: int, *, owner: str, fence: int, result: Any = None
    ) -> None:
        """Settle as succeeded (fenced); chained children fire in the same transaction.

        ``result`` is stored as :func:`~kernel.records.stored_result` keeps it: JSON of at
        most 64 KiB, else its type and a bounded repr."""
        _succeed(tx, occurrence_id, owner, fence, stored_result(result), alone=True)

    @write
    def succeed_and_claim(
        self,
        tx: Tx,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        result: Any = None,
        next_occurrence_id: int,
        lease: float | None = None,
    ) -> Claim | None:
        """:meth:`succeed` and then :meth:`claim` of ``next_occurrence_id`` by the same owner,
        committed together (a batch's next run). The claim's None changes nothing; LeaseLost
        from the settle leaves both undone."""
        result = stored_result(result)
        if _may_report(result):
            _succeed(tx, occurrence_id, owner, fence, result, alone=False)
            return claiming.claim(tx, next_occurrence_id, owner, lease_ms(lease))
        return claiming.succeed_and_claim(
            tx, occurrence_id, owner, fence, result, next_occurrence_id, lease_ms(lease)
        )

    @write
    def fail(
        self,
        tx: Tx,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        code: str,
        message: str,
        retryable: bool = True,
        effect: Effect | str = Effect.NOT_APPLIED,
        retry_in: float | None = None,
        retry_with: Mapping[str, Any] | None = None,
        traceback: str | None = None,
    ) -> str:
        """Settle a failure (fenced): retry_wait with backoff, or dead_letter; returns which.

        ``effect`` is what the failed run is known to have done (:class:`kernel.Effect`):
        an at-most-once occurrence whose effect is ``unknown`` goes to needs_adjudication
        instead, one whose effect is ``applied`` is not retried. ``retry_in`` (seconds)
        replaces the backoff policy's delay when the job code chose one; ``retry_with``
        (``{"args": [...], "kwargs": {...}}``, a task's run only) the arguments the retry
        runs with (checked and bounded as an enqueue's). ``traceback`` is
        kept with the error (its last ``TRACEBACK_LIMIT`` characters: the innermost frames).
        """
        error = {"code": code, "message": message[:2000]}
        if traceback:
            error["traceback"] = (
                traceback
                if len(traceback) <= TRACEBACK_LIMIT
                else "...\n" + traceback[-(TRACEBACK_LIMIT - 4) :]
            )
        return runs.settle(
            tx,
            occurrence_id,
            owner,
            fence,
            outcome="failed",
            error=error,
            retryable=retryable,
            effect=effect,  # type: ignore[arg-type]  # settle refuses a wrong one by name
            retry_in=retry_in,
            retry_with=retry_with,
        ).value

    @write
    def cancelled(self, tx: Tx, occurrence_id: int, *, owner: str, fence: int) -> None:
        """The holder stopped on a cancel request (fenced)."""
        runs.settle(
            tx,
            occurrence_id,
            owner,
            fence,
            outcome="cancelled",
            error={"code": "CANCELLED", "message": "cancelled while running"},
        )

    def ack_pause(
        self,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        request_id: str,
        expected_revision: int | None,
        safe_point: str,
        checkpoint: Any,
    ) -> None:
        """Acknowledge a pause at a declared safe point, storing the checkpoint (≤ 64 KiB)."""
        self._release(
            occurrence_id, owner, fence, safe_point, checkpoint, request_id, expected_revision
        )

    def hand_back(
        self, occurrence_id: int, *, owner: str, fence: int, safe_point: str, checkpoint: Any
    ) -> None:
        """Give the occurrence back for another worker to resume at once (warm shutdown)."""
        self._release(occurrence_id, owner, fence, safe_point, checkpoint, None, None)

    @write
    def _release(
        self,
        tx: Tx,
        occurrence_id: int,
        owner: str,
        fence: int,
        safe_point: str,
        checkpoint: Any,
        pause_request_id: str | None,
        expected_revision: int | None,
    ) -> None:
        """Both acts are the kernel's one release at a safe point
        (:func:`kernel.occurrences.releases.release`); a pause request id makes it the pause's
        acknowledgement."""
        releases.release(
            tx,
            occurrence_id,
            owner,
            fence,
            safe_point=safe_point,
            checkpoint=checkpoint,
            pause_request_id=pause_request_id,
            expected_revision=expected_revision,
        )

    @write
    def append_output(
        self,
        tx: Tx,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        chunks: Sequence[tuple[str, str]],
    ) -> None:
        """Store ``(stream, text)`` chunks of a run's output (fenced; see
        :mod:`kernel.occurrences.output`)."""
        output.append_output(tx, occurrence_id, owner, fence, chunks)


class WorkerLane:
    """``Kernel.claim`` (the job's own lease) and ``Kernel.succeed`` for the worker's run.

    Why it exists: the worker makes these two calls on every run, and the facade's generic
    wrappers around them (every argument checked against its annotations, the transaction's
    closure, bench/README.md, session 25) were ~20-36 µs of a run's CPU. The same checks of what
    comes from outside, by hand, and the same functions in one transaction each; the runs a
    settle makes are published as the facade's are.
    """

    __slots__ = ("_kernel",)

    def __init__(self, kernel: FacadeBase) -> None:
        self._kernel = kernel

    def claim(self, occurrence_id: int, *, owner: str) -> Claim | None:
        _int(occurrence_id, "occurrence_id")
        _name(owner, "owner")
        return run_write(self._kernel, claiming.claim, occurrence_id, owner, None)

    def succeed(self, occurrence_id: int, *, owner: str, fence: int, result: Any = None) -> None:
        _int(occurrence_id, "occurrence_id")
        _name(owner, "owner")
        _int(fence, "fence")
        run_write(self._kernel, _succeed, occurrence_id, owner, fence, stored_result(result), True)


def _succeed(tx: Tx, occurrence_id: int, owner: str, fence: int, result: Any, alone: bool) -> None:
    """The settle of a success, and a watchdog check's report (alert, self-destruct) in its
    transaction: upkeep sits above the occurrences' code, so the facade composes the two."""
    report = _may_report(result)
    runs.settle(
        tx,
        occurrence_id,
        owner,
        fence,
        outcome="succeeded",
        result=result,
        alone=alone and not report,  # the report is written after the settle
    )
    if report:
        watchdog_jobs.record_report(tx, occurrence_id, fence, result)


def _may_report(result: Any) -> bool:
    """A result under the watchdog's key: :func:`~kernel.upkeep.watchdog_jobs.record_report`
    reads it (a plain success calls nothing more, so its path stays short)."""
    # None (most results) is no Mapping: said without the ABC's check.
    return result is not None and isinstance(result, Mapping) and watchdog_jobs.KIND in result
