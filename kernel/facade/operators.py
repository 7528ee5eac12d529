"""The facade's operator actions on one occurrence, each idempotent by request id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernel.facade.base import FacadeBase, answered, write
from kernel.occurrences import firing, pausing, verdicts
from kernel.occurrences import operator as op
from kernel.transaction.tx import Tx
from kernel.types import ActionResult

__all__ = ["OperatorFacade"]


class OperatorFacade(FacadeBase):
    @write
    def run_now(
        self,
        tx: Tx,
        job_id: str,
        *,
        request_id: str,
        operator: str,
        force: bool = False,
        params: dict[str, Any] | None = None,
    ) -> ActionResult:
        """Run a job now (also a disabled one); a retried request id never runs twice.

        Admitted like a firing (overlap policy, ``max_queued``) unless ``force``.
        ``params``: a JSON object merged into this occurrence's payload only (RFC 7386),
        validated as the payload is, recorded in its ``occurrence_created`` event.

        Raises:
            InvalidArgument: the params, or the payload they make (``field`` ``params...``).
            StateConflict: not admitted (``reason``: ``overlap`` or ``queue_full``).
            RevisionConflict: a replay of ``request_id`` after the job was revised.
            EvidenceConflict: a replay of ``request_id`` with other params.
        """
        made, deduplicated = firing.run_now(
            tx, job_id, request_id, operator, force=force, params=params
        )
        return answered(tx, made, request_id, deduplicated)

    @write
    def request_pause(
        self,
        tx: Tx,
        occurrence_id: int,
        *,
        expected_fence: int | None = None,
        request_id: str,
        safe_points: Sequence[str],
        operator: str,
        expected_revision: int | None = None,
        checkpoint_schema_version: int = 1,
    ) -> ActionResult:
        """Ask the holder to pause at its next safe point (PAUSE_UNSUPPORTED without any).

        ``expected_fence`` / ``expected_revision``: pause only that run / control
        revision (None: whatever runs now). ``safe_points`` and
        ``checkpoint_schema_version`` are the adapter's declared capability; its
        digest is part of the request's replay evidence.
        """
        return answered(
            tx,
            occurrence_id,
            request_id,
            pausing.request_pause(
                tx,
                occurrence_id,
                request_id=request_id,
                expected_fence=expected_fence,
                expected_revision=expected_revision,
                safe_points=tuple(safe_points),
                schema_version=checkpoint_schema_version,
                operator=operator,
            ),
        )

    @write
    def resume(
        self,
        tx: Tx,
        occurrence_id: int,
        *,
        request_id: str,
        operator: str,
        expected_revision: int | None = None,
    ) -> ActionResult:
        return answered(
            tx,
            occurrence_id,
            request_id,
            pausing.resume(
                tx,
                occurrence_id,
                request_id=request_id,
                expected_revision=expected_revision,
                operator=operator,
            ),
        )

    @write
    def requeue(
        self,
        tx: Tx,
        occurrence_id: int,
        *,
        expected_fence: int | None = None,
        expected_error_code: str | None = None,
        request_id: str,
        operator: str,
    ) -> ActionResult:
        """Revive a dead letter; the evidence given (fence, error code) must still hold."""
        return answered(
            tx,
            occurrence_id,
            request_id,
            op.requeue(
                tx,
                occurrence_id,
                request_id=request_id,
                expected_fence=expected_fence,
                expected_error_code=expected_error_code,
                operator=operator,
            ),
        )

    @write
    def adjudicate(
        self, tx: Tx, occurrence_id: int, *, decision: str, request_id: str, operator: str
    ) -> ActionResult:
        return answered(
            tx,
            occurrence_id,
            request_id,
            verdicts.adjudicate(
                tx, occurrence_id, request_id=request_id, decision=decision, operator=operator
            ),
        )

    @write
    def cancel(self, tx: Tx, occurrence_id: int, *, request_id: str, operator: str) -> ActionResult:
        return answered(
            tx,
            occurrence_id,
            request_id,
            op.cancel(tx, occurrence_id, request_id=request_id, operator=operator),
        )

    @write
    def revoke(
        self, tx: Tx, task_ids: Sequence[str], *, terminate: bool, operator: str
    ) -> list[op.Revoked]:
        """Celery's ``revoke`` of routed runs, by the task ids their callers hold (each
        run's caller's key): a run not started is cancelled (its result owed as REVOKED),
        a running one asked to stop when ``terminate``, else left to finish, as under
        Celery. Idempotent: a run already ended or asked is left be, so every worker of a
        broadcast may carry it out.

        Returns:
            Every routed run the ids name (an id of none is not routed: Celery's own), each
            with whether this call moved it and the fence its owed end is hinted by.
        """
        return op.revoke(tx, task_ids, terminate=terminate, operator=operator)

    @write
    def revoke_stamped(
        self, tx: Tx, stamps: Mapping[str, Any], *, terminate: bool, operator: str
    ) -> list[op.Revoked]:
        """Celery's ``revoke_by_stamped_headers`` of routed runs: those not ended whose
        call's stamps match ``stamps`` (a stamp name to one value or a list of them), as
        :meth:`revoke` does by task id; every such run, as :meth:`revoke` answers."""
        return op.revoke_stamped(tx, stamps, terminate=terminate, operator=operator)
