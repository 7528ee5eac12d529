"""Unknown outcomes the adapter answers before an operator
(kernel/occurrences/adapter_verdicts.py)."""

from __future__ import annotations

from kernel.facade.base import FacadeBase, ms, read, write
from kernel.occurrences import adapter_verdicts
from kernel.reports import AdapterAsk, Adjudication, Verdict
from kernel.transaction.tx import Tx
from kernel.types import DispatchHint, Occurrence

__all__ = ["VerdictFacade"]


class VerdictFacade(FacadeBase):
    @write
    def adapter_asks_due(
        self, tx: Tx, *, limit: int = 200, rehint_after: float = 30.0
    ) -> list[DispatchHint]:
        """Occurrences needing adjudication whose adapter a worker should ask now (Beat
        hints them); each is marked hinted."""
        return adapter_verdicts.adapter_asks_due(
            tx, limit=limit, rehint_after_ms=ms(rehint_after, "rehint_after")
        )

    @write
    def ask_adapter(
        self, tx: Tx, occurrence_id: int, *, asker: str, window: float
    ) -> AdapterAsk | None:
        """Take the one live ask of the occurrence's uncertain run for ``window`` seconds
        (event ``occurrence_adapter_asked``); None when it is not to be asked now."""
        return adapter_verdicts.ask_adapter(
            tx, occurrence_id, asker=asker, window_ms=ms(window, "window")
        )

    @write
    def adapter_adjudicates(
        self, tx: Tx, occurrence_id: int, *, token: str, verdict: Verdict
    ) -> Occurrence:
        """Apply the adapter's verdict of ask ``token`` (``occurrence_adjudicated``,
        ``authority: adapter``).

        Raises:
            StateConflict: an operator decided first; the answer changes nothing.
            LeaseLost: the ask expired or another worker asks now.
            InvalidArgument: not applied/not_applied, or evidence too large.
        """
        return adapter_verdicts.adapter_adjudicates(tx, occurrence_id, token=token, verdict=verdict)

    @write
    def adapter_cannot_tell(self, tx: Tx, occurrence_id: int, *, token: str, reason: str) -> None:
        """The adapter of ask ``token`` could not tell (``occurrence_adapter_cannot_tell``):
        nobody asks again for this run; the operator decides. Raises as
        :meth:`adapter_adjudicates`."""
        adapter_verdicts.adapter_cannot_tell(tx, occurrence_id, token=token, reason=reason)

    @read
    def last_adjudication(self, tx: Tx, occurrence_id: int) -> Adjudication | None:
        """The last verdict (operator's or adapter's) on an uncertain run of the occurrence."""
        return adapter_verdicts.last_adjudication(tx, occurrence_id)
