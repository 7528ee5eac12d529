"""An enqueued batch's rows, made in the chunks its statements take.

A PostgreSQL batch is made while it is inserted: its first chunk is sent (pipelined,
:func:`kernel.occurrences.rows.insert_chunks`) and the server inserts it while this
process makes the rest, sent as the next statement. The first chunk is a fifth of the
batch: the server spends about 25 µs a row and ~1 ms a statement, this process about
9 µs a row making one, so that fifth's insert lasts about as long as the rest's making,
and each statement more would cost the server more than it overlaps (bench/README.md,
session 24: enqueue).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kernel.db.driver import pipelines
from kernel.errors import InvalidArgument
from kernel.spec.enqueue_request import EnqueueRequest, EnqueueRow, prepare, task_job_id
from kernel.spec.task_runs import settings_json, task_job
from kernel.statements import MAX_ROWS, enqueue_chunks
from kernel.transaction.tx import Tx

__all__ = ["STREAMED_ROWS", "prepared", "streamed", "task_specs"]

#: The smallest batch made while it is inserted: below it, a second statement costs the
#: server more than the making it overlaps.
STREAMED_ROWS = 200
#: The first statement of a streamed batch takes this share of its rows.
_FIRST_SHARE = 5


def streamed(
    tx: Tx,
    requests: Sequence[EnqueueRequest],
    chord: Mapping[str, Any] | None,
    nested: Sequence[Any],
) -> bool:
    """Whether the rows are made while the first ones are inserted: a batch of
    :data:`STREAMED_ROWS` or more on a pipelining connection (PostgreSQL's; SQLite's
    statements are this process's own work, nothing to overlap) whose jobs are its tasks'
    own (no chord, none nested, no links: those jobs are known only once every row is
    made, and defined before any)."""
    return (
        pipelines(tx.conn) and chord is None and not nested and len(requests) >= STREAMED_ROWS
        and not any(r.callbacks or r.errbacks for r in requests)
    )  # fmt: skip


def task_specs(
    requests: Sequence[EnqueueRequest], specs: dict[str, dict[str, Any]], encoded: dict[int, str]
) -> None:
    """The tasks' job specs :func:`prepare` collects, before any row is made: each task's
    first request's, which prepare keeps for its job (a request it refuses is left to it:
    nothing is written then)."""
    refused: set[str] = set()
    for request in requests:
        task = request.task
        if not isinstance(task, str) or not task or task in refused:
            continue
        job_id = task_job_id(task)
        if job_id in specs:
            continue
        try:
            specs[job_id] = task_job(task, settings_json(request.settings, encoded))[0]
        except InvalidArgument:
            refused.add(task)


def prepared(
    requests: Sequence[EnqueueRequest],
    specs: dict[str, dict[str, Any]],
    hinted: bool,
    encoded: dict[int, str],
    rows: list[EnqueueRow],
    *,
    streamed: bool,
) -> Iterator[list[EnqueueRow]]:
    """The requests' rows, a statement's chunk at a time (``streamed``: a fifth of them
    first; else all at once), each added to ``rows`` as it is made; a refusal names its
    request (``requests[i].`` first in a batch)."""
    first = min(len(requests) // _FIRST_SHARE, MAX_ROWS) if streamed else len(requests)
    chunks = [(0, first)] if first else []
    chunks += [(first + start, size) for start, size in enqueue_chunks(len(requests) - first)]
    for start, size in chunks:
        for index in range(start, start + size):
            try:
                rows.append(prepare(requests[index], specs, hinted, encoded=encoded))
            except InvalidArgument as exc:
                if len(requests) == 1:
                    raise
                why = exc.message.removeprefix(f"{exc.field}: ")
                raise InvalidArgument(f"requests[{index}].{exc.field}", why) from None
        yield rows[start:]
