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

import sqlalchemy as sa

from kernel.records import dumps
from kernel.runs import _lease_lost
from kernel.schema import events, occurrences
from kernel.tx import Tx

__all__ = ["RUN_OUTPUT", "append_output"]

#: The event type of a run's output.
RUN_OUTPUT = "run_output"

_OCC = occurrences
_p = sa.bindparam
_APPEND = (
    sa.insert(events)
    .from_select(
        ["at", "type", "job_id", "occurrence_id", "fence", "data"],
        sa.select(
            _p("now", type_=sa.BigInteger),
            sa.literal(RUN_OUTPUT),
            _OCC.c.job_id,
            _OCC.c.id,
            _OCC.c.fence,
            _p("data", type_=sa.Text),
        ).where(
            _OCC.c.id == _p("occ_id"),
            _OCC.c.status == "running",
            _OCC.c.lease_owner == _p("owner"),
            _OCC.c.fence == _p("held_fence"),
            _OCC.c.lease_expires_at > _p("now"),
        ),
    )
    .returning(events.c.id)
)  # RETURNING, not rowcount: INSERT ... SELECT reports -1 on psycopg


def append_output(
    tx: Tx, occ_id: int, owner: str, fence: int, chunks: Sequence[tuple[str, str]]
) -> None:
    """Add one ``run_output`` event, refused unless (owner, fence) holds the lease."""
    data = dumps({"output": [{"stream": stream, "text": text} for stream, text in chunks]})
    params = {"now": tx.now, "data": data, "occ_id": occ_id, "owner": owner, "held_fence": fence}
    if tx.conn.execute(_APPEND, params).first() is None:
        raise _lease_lost(tx, occ_id, owner, fence)
