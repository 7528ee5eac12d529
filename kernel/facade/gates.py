"""The facade's gates and limits: approvals, shared budgets and resource pools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernel import approvals, budgets, jobspec
from kernel import pools as pool_ops
from kernel.facade.base import FacadeBase
from kernel.spec.sections import Budget
from kernel.types import ActionResult, Pool

__all__ = ["GateFacade", "checked_budgets"]


def checked_budgets(defined: Mapping[str, Mapping[str, Any] | Budget]) -> dict[str, Budget]:
    """Each budget read by the spec's model (a :class:`Budget` is already read)."""
    return {name: jobspec.read_budget(b, f"budgets.{name}") for name, b in defined.items()}


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

    def _decide(
        self,
        occurrence_id: int,
        approved: bool,
        request_id: str,
        operator: str,
        reason: str | None,
    ) -> ActionResult:
        return self._action(
            approvals.decide,
            occurrence_id,
            request_id,
            approved=approved,
            operator=operator,
            reason=reason,
        )

    def apply_approval_timeouts(self, limit: int = 200) -> dict[str, int]:
        """Beat: apply ``approval.auto`` to occurrences whose approval timed out.

        Returns:
            ``{"approved": n, "rejected": m}``.
        """
        return self._write(approvals.apply_timeouts, limit)

    def set_budgets(self, defined: Mapping[str, Mapping[str, Any] | Budget]) -> list[str]:
        """Create or update shared budgets: name -> ``{"window", "max_runs", "max_units"}``.

        Raises:
            InvalidArgument: a budget is invalid (``field`` names it); nothing is written.
        """

        return self._write(budgets.set_budgets, checked_budgets(defined))

    def list_budgets(self) -> list[dict[str, Any]]:
        """Every budget with the runs and units counted in its latest window."""
        return self._read(budgets.list_budgets)

    def set_pool_limit(self, name: str, limit: int) -> tuple[Pool, bool]:
        """Define pool ``name`` or change its limit (event ``pool_limit_set``); ``changed``
        is false when it already had ``limit``."""
        return self._write(pool_ops.set_limit, name, limit)

    def pools(self) -> list[Pool]:
        """Every pool with its limit, running and waiting counts, by name."""
        return self._read(pool_ops.list_pools)
