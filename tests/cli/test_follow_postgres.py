"""Following the log on PostgreSQL (issue 39 item 5): ``events --follow`` prints an event
whose transaction commits after a later id, once, and a printed cursor resumes past it;
a page's cursor reads on past late commits too; ``occurrences logs --follow`` reads
through the same cursor."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from cli.support import Lines, define, stop

from kernel import Kernel


@pytest.fixture
def db_url(pg_database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI's database: a fresh PostgreSQL one (the suite's default is SQLite)."""
    monkeypatch.setenv("KERNEL_DATABASE_URL", pg_database_url)
    return pg_database_url


@pytest.fixture
def caller(db_url: str) -> Iterator[sa.Engine]:
    """An application's own engine, whose transaction the kernel enqueues in."""
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    yield engine
    engine.dispose()


def _created(lines: Lines) -> dict[str, Any]:
    """The next ``occurrence_created`` the follower prints (skipping other events)."""
    while (event := json.loads(lines.next()))["type"] != "occurrence_created":
        pass
    return event


def test_events_follow_prints_a_late_commit_once_and_resumes_from_a_cursor(
    spawn, kernel: Kernel, caller: sa.Engine
) -> None:
    for task in ("proj.held", "proj.later"):  # their implicit jobs exist before the race
        kernel.enqueue(task=task)
    follow = spawn("events", "--follow", "--json", "--interval", "0.1")
    out = Lines(follow.stdout)
    assert "following events after id" in Lines(follow.stderr).next()
    with caller.connect() as conn:
        trans = conn.begin()
        held = kernel.enqueue(task="proj.held", connection=conn).occurrence_id
        later = kernel.enqueue(task="proj.later").occurrence_id
        assert held is not None and later is not None and held < later
        seen_later = _created(out)  # printed while the held transaction is still open
        assert seen_later["occurrence_id"] == later
        trans.commit()
    seen_held = _created(out)
    assert seen_held["occurrence_id"] == held and seen_held["id"] < seen_later["id"]
    # Resuming from the cursor printed with the later event prints the held one, and
    # nothing that cursor had already passed.
    resumed = spawn("events", "--follow", "--json", "--after", seen_later["cursor"])
    again = Lines(resumed.stdout)
    assert json.loads(again.next())["id"] == seen_held["id"]
    third = kernel.enqueue(task="proj.later").occurrence_id
    assert _created(again)["occurrence_id"] == third
    assert _created(out)["occurrence_id"] == third  # the held one was not printed twice
    for proc in (follow, resumed):
        assert stop(proc, signal.SIGINT) == 130


def test_occurrence_logs_follow_reads_the_same_cursor_until_the_run_settles(
    spawn, kernel: Kernel
) -> None:
    define(kernel, "chatty")
    occ = kernel.run_now("chatty", request_id="r", operator="t", force=True).occurrence.id
    assert kernel.claim(occ, owner="w", lease=60) is not None
    kernel.append_output(occ, owner="w", fence=1, chunks=[("stdout", "one\n")])
    logs = spawn("occurrences", "logs", str(occ), "--follow", "--json", "--interval", "0.1")
    out = Lines(logs.stdout)
    assert json.loads(out.next())["text"] == "one\n"
    kernel.append_output(occ, owner="w", fence=1, chunks=[("stderr", "two\n")])
    assert json.loads(out.next())["text"] == "two\n"
    kernel.succeed(occ, owner="w", fence=1)
    assert logs.wait(timeout=30) == 0


def test_a_page_cursor_reads_on_past_a_late_commit(cli, kernel: Kernel, caller: sa.Engine) -> None:
    for task in ("proj.held", "proj.later"):  # their implicit jobs exist before the race
        kernel.enqueue(task=task)
    with caller.connect() as conn:
        trans = conn.begin()
        held = kernel.enqueue(task="proj.held", connection=conn).occurrence_id
        later = kernel.enqueue(task="proj.later").occurrence_id
        page = cli("events", "--json").json()
        assert later in {e["occurrence_id"] for e in page["events"]}
        assert held not in {e["occurrence_id"] for e in page["events"]}
        trans.commit()
    on = cli("events", "--after", page["cursor"], "--json").json()
    assert [e["occurrence_id"] for e in on["events"]] == [held] and not on["more"]
    assert on["events"][0]["id"] < page["last_id"]  # an id cursor would have skipped it
