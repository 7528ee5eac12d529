"""The console's live stream on PostgreSQL (issue 39 item 5): a batch whose transaction
commits after a later id is still sent, once, and a message's id resumes past it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import sqlalchemy as sa

from celery_app.web.event_log import LiveStreams, _stream
from kernel import EventCursor, Kernel

_EVERYTHING: dict[str, Any] = {"job_id": None, "occurrence_id": None, "types": None, "since": None}


async def _message(stream: AsyncIterator[str]) -> tuple[str, list[dict[str, Any]]]:
    """The next ``events`` message: its id and the events it carries."""
    while not (text := await anext(stream)).startswith("id: "):
        pass
    head, _, data = text.strip().split("\n")
    return head.removeprefix("id: "), json.loads(data.removeprefix("data: "))


def _created(sent: list[dict[str, Any]]) -> list[int]:
    return [e["occurrence_id"] for e in sent if e["type"] == "occurrence_created"]


def test_the_live_stream_sends_a_late_commit_once(pg_database_url: str) -> None:
    kernel = Kernel.open(pg_database_url, migrate_schema=True)
    caller = sa.create_engine(pg_database_url, poolclass=sa.pool.NullPool)

    async def follow() -> None:
        for task in ("proj.held", "proj.later"):  # their implicit jobs exist before the race
            kernel.enqueue(task=task)
        stream = _stream(kernel, LiveStreams(), kernel.event_cursor(), _EVERYTHING)
        with caller.connect() as conn:
            trans = conn.begin()
            held = kernel.enqueue(task="proj.held", connection=conn).occurrence_id
            later = kernel.enqueue(task="proj.later").occurrence_id
            assert held is not None and later is not None and held < later
            first_id, first = await _message(stream)
            assert _created(first) == [later]
            trans.commit()
        _, second = await _message(stream)
        assert _created(second) == [held]
        third = kernel.enqueue(task="proj.later").occurrence_id
        _, last = await _message(stream)
        assert _created(last) == [third]  # the held one was not sent twice
        await stream.aclose()
        # A browser reconnecting with the first message's id gets what followed it.
        again = _stream(kernel, LiveStreams(), EventCursor.parse(first_id), _EVERYTHING)
        _, resumed = await _message(again)
        assert _created(resumed) == [held, third]
        await again.aclose()

    try:
        asyncio.run(follow())
    finally:
        caller.dispose()
        kernel.close()
