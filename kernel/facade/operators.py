"""The facade's operator actions on one occurrence, each idempotent by request id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernel import admission, pausing, verdicts
from kernel import operator as op
from kernel.facade.base import FacadeBase
from kernel.types import ActionResult

__all__ = ["OperatorFacade"]


class OperatorFacade(FacadeBase):
    def run_now(
        self,
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
        occ_id, dedup = self._write(
            admission.run_now, job_id, request_id, operator, force=force, params=params
        )
        return self._answer(occ_id, request_id, dedup)

    def request_pause(
        self,
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
        return self._action(
            pausing.request_pause,
            occurrence_id,
            request_id,
            expected_fence=expected_fence,
            expected_revision=expected_revision,
            safe_points=tuple(safe_points),
            schema_version=checkpoint_schema_version,
            operator=operator,
        )

    def resume(
        self,
        occurrence_id: int,
        *,
        request_id: str,
        operator: str,
        expected_revision: int | None = None,
    ) -> ActionResult:
        return self._action(
            pausing.resume,
            occurrence_id,
            request_id,
            expected_revision=expected_revision,
            operator=operator,
        )

    def requeue(
        self,
        occurrence_id: int,
        *,
        expected_fence: int | None = None,
        expected_error_code: str | None = None,
        request_id: str,
        operator: str,
    ) -> ActionResult:
        """Revive a dead letter; the evidence given (fence, error code) must still hold."""
        return self._action(
            op.requeue,
            occurrence_id,
            request_id,
            expected_fence=expected_fence,
            expected_error_code=expected_error_code,
            operator=operator,
        )

    def adjudicate(
        self, occurrence_id: int, *, decision: str, request_id: str, operator: str
    ) -> ActionResult:
        return self._action(
            verdicts.adjudicate, occurrence_id, request_id, decision=decision, operator=operator
        )

    def cancel(self, occurrence_id: int, *, request_id: str, operator: str) -> ActionResult:
        return self._action(op.cancel, occurrence_id, request_id, operator=operator)
