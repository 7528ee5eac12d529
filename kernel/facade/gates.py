"""The facade's gates and limits: approvals, shared budgets and resource pools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernel.facade.base import FacadeBase, answered, read, write
from kernel.limits import budgets
from kernel.limits import pools as pool_ops
from kernel.occurrences import approvals
from kernel.spec import sections
from kernel.spec.sections import Budget
from kernel.transaction.tx import Tx
from kernel.types import ActionResult, Pool

__all__ = ["GateFacade", "checked_budgets"]


def checked_budgets(defined: Mapping[str, Mapping[str, Any] | Budget]) -> dict[str, Budget]:
    """Each budget read by the spec's model (a :class:`Budget` is already read)."""
    return {name: sections.read_budget(b, f"budgets.{name}") for name, b in defined.items()}


class GateFacade(FacadeBase):
    def approve(
        self, occurrence_id: int, *, request_id: str, operator: str, reason: str | None = None
    ) -> ActionResult:
        """Queue an occurrence awaiting approval (idempotent by request id).

        Raises:
            StateConflict: it is not awaiting approval.
        """
        return self._decide(occurrence_id, True, request_id, operator, reason)

    def reject(
        self, occurrence_id: int, *, request_id: str, operator: str, reason: str | None = None
    ) -> ActionResult:
        """Skip an occurrence awaiting approval (reason ``approval_rejected``).

        Raises:
            StateConflict: it is not awaiting approval.
        """
        return self._decide(occurrence_id, False, request_id, operator, reason)

    @write
    def _decide(
        self,
        tx: Tx,
        occurrence_id: int,
        approved: bool,
        request_id: str,
        operator: str,
        reason: str | None,
    ) -> ActionResult:
        return answered(
            tx,
            occurrence_id,
            request_id,
            approvals.decide(
                tx,
                occurrence_id,
                request_id=request_id,
                approved=approved,
                operator=operator,
                reason=reason,
            ),
        )

    @write
    def apply_approval_timeouts(self, tx: Tx, limit: int = 200) -> dict[str, int]:
        """Beat: apply ``approval.auto`` to occurrences whose approval timed out.

        Returns:
            ``{"approved": n, "rejected": m}``.
        """
        return approvals.apply_timeouts(tx, limit)

    @write
    def set_budgets(self, tx: Tx, defined: Mapping[str, Mapping[str, Any] | Budget]) -> list[str]:
        """Create or update shared budgets: name -> ``{"window", "max_runs", "max_units"}``.

        Raises:
            InvalidArgument: a budget is invalid (``field`` names it); nothing is written.
        """

        return budgets.set_budgets(tx, checked_budgets(defined))

    @read
    def list_budgets(self, tx: Tx) -> list[dict[str, Any]]:
        """Every budget with the runs and units counted in its latest window."""
        return budgets.list_budgets(tx)

    @write
    def set_pool_limit(self, tx: Tx, name: str, limit: int) -> tuple[Pool, bool]:
        """Define pool ``name`` or change its limit (event ``pool_limit_set``); ``changed``
        is false when it already had ``limit``."""
        return pool_ops.set_limit(tx, name, limit)

    @read
    def pools(self, tx: Tx) -> list[Pool]:
        """Every pool with its limit, running and waiting counts, by name."""
        return pool_ops.list_pools(tx)
