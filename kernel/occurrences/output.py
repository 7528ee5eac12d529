"""A run's captured output, kept as ``run_output`` events of its occurrence.

Output is part of an occurrence's history, so it goes where that history already is:
the event log is append-only, ordered, paged by id (``occurrences logs --follow``
reads it like ``events --follow``), and pruned with the settled occurrence. That
needs no table of its own and no migration. Each flush is one event holding the
chunks written since the last one (``{"output": [{"stream", "text"}, ...]}``); the
worker bounds what it sends by the job's ``output`` policy.

Writing output is a worker write, so it is fenced like a settle: one guarded
``INSERT ... SELECT`` that adds the event only while (owner, fence) holds a live lease.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel import statements as st
from kernel.occurrences.runs import lease_lost
from kernel.records import dumps
from kernel.transaction.tx import Tx

__all__ = ["append_output"]


def append_output(
    tx: Tx, occurrence_id: int, owner: str, fence: int, chunks: Sequence[tuple[str, str]]
) -> None:
    """Add one ``run_output`` event, refused unless (owner, fence) holds the lease."""
    data = dumps({"output": [{"stream": stream, "text": text} for stream, text in chunks]})
    params = {
        "now": tx.now,
        "data": data,
        "occurrence_id": occurrence_id,
        "owner": owner,
        "held_fence": fence,
    }
    if tx.conn.execute(st.APPEND_OUTPUT, params).first() is None:
        raise lease_lost(tx, occurrence_id, owner, fence)
