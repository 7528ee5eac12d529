"""On SQLite a prune goes in short steps, each its own transaction, and lets other writers in
between (issue 42: a retention pass holding SQLite's one writer lock for its whole batch made
a claim wait 13x its idle p99); on PostgreSQL, where a claim never waits for it, it stays one
transaction. What a pass deletes and reports is the same on both."""

from __future__ import annotations

import sqlite3
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from kernel import Kernel
from kernel.db import driver as kernel_driver
from kernel.states import OccurrenceStatus as S
from kernel.upkeep.history import FIRST_STEP, MIN_STEP, STEP_S, next_step

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

DAY = 86400.0


def settled(k: Harness, n: int) -> list[int]:
    """``n`` succeeded occurrences of ``job`` (made 20 at a time: a job queues at most 25)."""
    ids: list[int] = []
    while len(ids) < n:
        for occ in k.occurrences("job", min(20, n - len(ids))):
            claim = k.kernel.claim(occ, owner="w1", lease=30)
            assert claim is not None
            k.kernel.succeed(occ, owner="w1", fence=claim.fence)
            ids.append(occ)
    return ids


def pruned_events(k: Harness) -> list[int]:
    """The occurrences each ``history_pruned`` event counted, oldest first."""
    return [
        e.data["occurrences"] for e in k.kernel.events(limit=1000) if e.type == "history_pruned"
    ]


def test_a_claim_is_taken_between_two_steps_of_one_retention_pass(
    k: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    if k.backend != "sqlite":
        pytest.skip("SQLite's one writer lock; PostgreSQL: the test below")
    old = settled(k, 2 * FIRST_STEP + 20)
    [waiting] = k.occurrences("job", 1)
    k.clock.advance(2 * DAY)
    claimer = Kernel.open(k.url, clock=k.clock)
    claimed_during_pass: list[int] = []

    def pause(seconds: float) -> None:
        # Between two steps: a writer of another kernel gets the lock (SQLite has one).
        if not claimed_during_pass:
            claim = claimer.claim(waiting, owner="w2", lease=30)
            assert claim is not None
            claimer.succeed(waiting, owner="w2", fence=claim.fence)
            claimed_during_pass.append(waiting)
        time.sleep(seconds)

    monkeypatch.setattr(
        "kernel.facade.upkeep.time",
        types.SimpleNamespace(perf_counter=time.perf_counter, sleep=pause),
    )
    try:
        done = k.kernel.apply_retention({"succeeded": DAY}, limit=2 * FIRST_STEP)
    finally:
        claimer.close()
    assert claimed_during_pass == [waiting]
    # The pass's report is the whole pass; each step's event says what it deleted.
    assert (done["occurrences"], done["events"] > 0, done["more"]) == (2 * FIRST_STEP, True, True)
    steps = pruned_events(k)
    assert len(steps) > 1 and sum(steps) == 2 * FIRST_STEP
    claimed = "occurrence_claimed"
    kinds = [
        e.type
        for e in k.kernel.events(limit=1000)
        if e.type == "history_pruned" or (e.occurrence_id == waiting and e.type == claimed)
    ]
    # The claim's event lies between two steps' events of the one pass.
    assert kinds[0] == kinds[-1] == "history_pruned" and claimed in kinds
    # The claimed run, settled during the pass, is younger than the age and stays.
    assert k.kernel.get_occurrence(waiting).status == S.SUCCEEDED
    assert k.kernel.apply_retention({"succeeded": DAY})["occurrences"] == len(old) - 2 * FIRST_STEP


def test_on_postgres_a_claim_goes_on_inside_the_prune_transaction(
    k: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    if k.backend != "postgres":
        pytest.skip("SQLite: one writer at a time, the test above")
    settled(k, FIRST_STEP + 5)
    [waiting] = k.occurrences("job", 1)
    k.clock.advance(2 * DAY)
    claimer = Kernel.open(k.url, clock=k.clock)
    send = kernel_driver.send

    def claim_now(conn: sa.Connection, sql: str, args: Any, *, fetch: bool) -> Any:
        sent = send(conn, sql, args, fetch=fetch)
        # The prune has deleted occurrences and not committed: nothing of it locks a claim.
        if conn.engine is k.kernel.engine and sql.startswith("DELETE FROM occurrences"):
            claim = claimer.claim(waiting, owner="w2", lease=30)
            assert claim is not None
            claimer.succeed(waiting, owner="w2", fence=claim.fence)
            claimed.append(waiting)
        return sent

    claimed: list[int] = []
    monkeypatch.setattr(kernel_driver, "send", claim_now)
    try:
        done = k.kernel.apply_retention({"succeeded": DAY})
    finally:
        claimer.close()
    assert claimed == [waiting] and done["occurrences"] == FIRST_STEP + 5
    assert pruned_events(k) == [FIRST_STEP + 5]  # one transaction, one event


def test_a_manual_prune_reports_its_steps_together(k: Harness) -> None:
    settled(k, FIRST_STEP + 5)
    k.clock.advance(2 * DAY)
    done = k.kernel.prune(older_than=timedelta(days=1))
    assert done["occurrences"] == FIRST_STEP + 5
    steps = pruned_events(k)
    assert sum(steps) == FIRST_STEP + 5
    assert steps[0] == (FIRST_STEP if k.backend == "sqlite" else FIRST_STEP + 5)


def test_a_step_is_sized_by_what_its_statements_and_its_commit_cost() -> None:
    # A quick commit (a tenth of STEP_S): the statements get what STEP_S leaves after it.
    commit = STEP_S / 10
    twice = 2 * (STEP_S - commit)
    assert next_step(100, twice, commit, 1000) == 50  # twice the time they may take: half
    assert next_step(50, STEP_S / 50, commit / 10, 1000) == 100  # quick: at most twice as many
    assert next_step(50, 1.0, commit, 1000) == MIN_STEP  # statements that waited on a disk
    assert next_step(50, STEP_S / 50, commit, 30) == 30  # never past the pass's limit
    # What STEP_S leaves after the commit goes to the statements, not a share of the
    # whole hold (the commit costs the same for 10 rows as for 100): a commit of 0.7 of
    # STEP_S and statements of a tenth of it for 25 rows leave room for twice as many,
    # where sizing by the whole hold would have made 31.
    assert next_step(25, STEP_S / 10, 0.7 * STEP_S, 1000) == 50
    # A commit of STEP_S or more: the fewest rows; cheaper steps, not longer ones.
    assert next_step(50, STEP_S / 10, 2 * STEP_S, 1000) == MIN_STEP


@contextmanager
def sent_statements(kernel: Kernel) -> Iterator[tuple[list[str], list[str]]]:
    """(statements run through Core, SQL sent on the driver) by ``kernel`` meanwhile."""
    core: list[str] = []
    driver: list[str] = []
    send = kernel_driver.send

    def on_driver(conn: sa.Connection, sql: str, args: Any, *, fetch: bool) -> Any:
        if conn.engine is kernel.engine:
            driver.append(sql)
        return send(conn, sql, args, fetch=fetch)

    def through_core(conn: Any, statement: Any, *_: Any) -> None:
        core.append(str(statement))

    sa.event.listen(kernel.engine, "before_execute", through_core)
    kernel_driver.send = on_driver
    try:
        yield core, driver
    finally:
        kernel_driver.send = send
        sa.event.remove(kernel.engine, "before_execute", through_core)


def test_a_step_is_sent_on_the_driver_without_deletes_that_would_find_nothing(
    k: Harness,
) -> None:
    # A step holds SQLite's writer lock for its statements' fixed cost too: Core's per-run
    # compiling of the expanding IN lists, and five deletes of rows settled runs seldom have
    # (bench/README.md session 19: 1.2 ms of a step's 1.5-2 ms). One probe stands for them.
    settled(k, FIRST_STEP + 5)
    k.clock.advance(2 * DAY)
    with sent_statements(k.kernel) as (core, driver):
        done = k.kernel.prune(older_than=timedelta(days=1))
    assert done["occurrences"] == FIRST_STEP + 5
    assert core == []
    deletes = sorted({sql.split()[2] for sql in driver if sql.startswith("DELETE")})
    assert deletes == ["events", "occurrences"]


def test_a_pruned_run_takes_its_control_and_operator_requests_with_it(k: Harness) -> None:
    paused = k.running().occurrence.id
    k.kernel.request_pause(
        paused, expected_fence=1, request_id="p", safe_points=["before_execute"], operator="ops"
    )
    k.kernel.succeed(paused, owner="w1", fence=1)
    [kept] = k.occurrences("job", 1)
    k.kernel.cancel(kept, request_id="c", operator="ops")
    k.clock.advance(2 * DAY)
    (plain,) = settled(k, 1)

    def naming(table: str) -> list[str]:
        with k.kernel.engine.connect() as conn:
            column = "target" if table == "operator_requests" else "occurrence_id"
            rows = conn.execute(sa.text(f"SELECT {column} FROM {table}"))  # noqa: S608
            return sorted(str(r[0]) for r in rows)

    assert naming("controls") == [str(paused)]
    assert naming("operator_requests") == sorted([str(paused), str(kept)])
    assert k.kernel.prune(older_than=timedelta(days=1))["occurrences"] == 2
    # The recent run stays; the old ones' rows went with them.
    assert [o.id for o in k.kernel.list_occurrences(job_id="job")] == [plain]
    assert naming("controls") == [] and naming("operator_requests") == []


def test_on_sqlite_every_transaction_of_a_pass_is_followed_by_a_pause(
    k: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a pause after a pass's last step and after its end, passes run back to back
    # (Beat's while one hits its bound) held the lock three times in a row: a claim's p99.
    if k.backend != "sqlite":
        pytest.skip("SQLite's one writer lock")
    settled(k, FIRST_STEP + 5)
    k.clock.advance(2 * DAY)
    pauses: list[float] = []
    monkeypatch.setattr(
        "kernel.facade.upkeep.time",
        types.SimpleNamespace(perf_counter=time.perf_counter, sleep=pauses.append),
    )
    done = k.kernel.apply_retention({"succeeded": DAY})
    assert done["occurrences"] == FIRST_STEP + 5
    steps = pruned_events(k)
    assert len(steps) == 2
    assert len(pauses) == len(steps) + 1 and all(p > 0 for p in pauses)


def _autocheckpoint(conn: sa.Connection) -> int:
    return int(conn.connection.dbapi_connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0])  # type: ignore[union-attr]


def test_on_sqlite_a_step_s_commit_leaves_the_checkpoint_to_after_the_step(
    k: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A commit that checkpoints copies the WAL into the database and syncs it while the
    step holds the writer gate (the longest holds: bench/README.md session 22). A step's
    connection commits without checkpointing, its setting restored before anything else
    runs on it, and the pruner checkpoints after the step, outside the gate."""
    if k.backend != "sqlite":
        pytest.skip("SQLite's WAL")
    settled(k, FIRST_STEP + 5)
    k.clock.advance(2 * DAY)
    during: list[int] = []
    send = kernel_driver.send

    def seen(conn: sa.Connection, sql: str, args: Any, *, fetch: bool) -> Any:
        if conn.engine is k.kernel.engine and sql.startswith(("DELETE FROM occurrences", "UPDATE")):
            during.append(_autocheckpoint(conn))
        return send(conn, sql, args, fetch=fetch)

    database = Path(k.url.removeprefix("sqlite:///"))
    with sqlite3.connect(database) as before:  # the settled runs into the database file
        before.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    monkeypatch.setattr(kernel_driver, "send", seen)
    assert k.kernel.apply_retention({"succeeded": DAY})["occurrences"] == FIRST_STEP + 5
    assert during == [0, 0]  # the pass's two steps
    # The pass's deletes are in the database file itself: checkpointed after each step.
    copy = tmp_path / "main-file-only.db"
    copy.write_bytes(database.read_bytes())
    with sqlite3.connect(copy) as alone:
        left = alone.execute("SELECT count(*) FROM occurrences WHERE status = 'succeeded'")
        assert left.fetchone()[0] == 0
    # The connection the steps ran on is back to SQLite's default for what runs next.
    held = k.kernel._session._held.conn
    assert held is not None and _autocheckpoint(held) == 1000


def test_on_postgres_each_transaction_of_a_pass_is_followed_by_a_pause_as_long(
    k: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No lock of the prune's stops a claim there, but its passes back to back took the
    two cores' CPU and the WAL's flushes from the claims (a claim's p99 6x its idle one
    at 2M / 10M): each transaction is followed by a pause as long as it took, so the
    prune takes at most about half of the time."""
    if k.backend != "postgres":
        pytest.skip("SQLite: test_on_sqlite_every_transaction_of_a_pass_is_followed_by_a_pause")
    settled(k, FIRST_STEP + 5)
    k.clock.advance(2 * DAY)
    pauses: list[float] = []
    held: list[float] = []
    session_run = k.kernel._session.run

    def timed(fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return session_run(fn, *args, **kwargs)
        finally:
            held.append(time.perf_counter() - start)

    monkeypatch.setattr(k.kernel._session, "run", timed)
    monkeypatch.setattr(
        "kernel.facade.upkeep.time",
        types.SimpleNamespace(perf_counter=time.perf_counter, sleep=pauses.append),
    )
    assert k.kernel.apply_retention({"succeeded": DAY})["occurrences"] == FIRST_STEP + 5
    assert len(pauses) == len(held) == 2  # the history's transaction, the pass's end
    assert all(0 < p <= h for p, h in zip(pauses, held, strict=True))
    assert sum(pauses) >= 0.5 * sum(held)
