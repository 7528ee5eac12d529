"""Unknown outcomes the adapter answers before an operator (kernel/adapter_verdicts.py)."""

from __future__ import annotations

from kernel import adapter_verdicts
from kernel.facade.base import FacadeBase, ms
from kernel.types import AdapterAsk, Adjudication, DispatchHint, Occurrence, Verdict

__all__ = ["VerdictFacade"]


class VerdictFacade(FacadeBase):
    def adapter_asks_due(
        self, *, limit: int = 200, rehint_after: float = 30.0
    ) -> list[DispatchHint]:
        """Occurrences needing adjudication whose adapter a worker should ask now (Beat
        hints them); each is marked hinted."""
        return self._write(
            adapter_verdicts.adapter_asks_due,
            limit=limit,
            rehint_after_ms=ms(rehint_after, "rehint_after"),
        )

    def ask_adapter(self, occurrence_id: int, *, asker: str, window: float) -> AdapterAsk | None:
        """Take the one live ask of the occurrence's uncertain run for ``window`` seconds
        (event ``occurrence_adapter_asked``); None when it is not to be asked now."""
        return self._write(
            adapter_verdicts.ask_adapter,
            occurrence_id,
            asker=asker,
            window_ms=ms(window, "window"),
        )

    def adapter_adjudicates(
        self, occurrence_id: int, *, token: str, verdict: Verdict
    ) -> Occurrence:
        """Apply the adapter's verdict of ask ``token`` (``occurrence_adjudicated``,
        ``authority: adapter``).

        Raises:
            StateConflict: an operator decided first; the answer changes nothing.
            LeaseLost: the ask expired or another worker asks now.
            InvalidArgument: not applied/not_applied, or evidence too large.
        """
        return self._write(
            adapter_verdicts.adapter_adjudicates, occurrence_id, token=token, verdict=verdict
        )

    def adapter_cannot_tell(self, occurrence_id: int, *, token: str, reason: str) -> None:
        """The adapter of ask ``token`` could not tell (``occurrence_adapter_cannot_tell``):
        nobody asks again for this run; the operator decides. Raises as
        :meth:`adapter_adjudicates`."""
        self._write(adapter_verdicts.adapter_cannot_tell, occurrence_id, token=token, reason=reason)

    def last_adjudication(self, occurrence_id: int) -> Adjudication | None:
        """The last verdict (operator's or adapter's) on an uncertain run of the occurrence."""
        return self._read(adapter_verdicts.last_adjudication, occurrence_id)
