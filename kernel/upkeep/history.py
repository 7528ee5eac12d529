"""Pruning settled history; unresolved work (dead letters, adjudications) is never pruned,
nor a chord's member before the chord's body is made (the body's arguments are read from
its members' results then). A done chord's row goes with the last of its members; one
with an empty header (no member ever) goes by age, with the successes closed as long ago."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.events import EventType
from kernel.states import RESOLVED, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.chords import RETENTION_FORGETS_CHORDS

__all__ = [
    "FIRST_STEP",
    "MIN_STEP",
    "PRUNABLE",
    "STEP_S",
    "checkpoint",
    "checkpoints_deferred",
    "forget",
    "forget_chords",
    "next_step",
    "prune",
    "restore_checkpoints",
]

#: Final and resolved: the statuses whose history may go (dead letters and
#: adjudications are unresolved and stay).
PRUNABLE: tuple[str, ...] = RESOLVED

#: On SQLite a prune goes in steps, each its own transaction holding the one writer lock
#: for about this long, so a claim queued behind a step waits this long, not for a
#: whole batch: 500 occurrences with their events held it 40-110 ms (bench/history.py).
#: 1 ms, not 5: a quiet claim's p99 during a full-size prune 4.6-4.7 -> 1.6-1.7 ms (idle
#: 0.9), the prune 14k -> 4k occurrences/s (bench/README.md, session 23).
STEP_S = 0.001
#: The first step's occurrences, before a step's cost says how many fit.
FIRST_STEP = 50
#: The fewest occurrences a step deletes, whatever the last one took (a step that waited
#: on a busy disk still gets somewhere).
MIN_STEP = 10


def next_step(rows: int, statements_s: float, commit_s: float, left: int) -> int:
    """How many occurrences the next step deletes, sized by what the last one cost:
    ``rows`` took ``statements_s`` of statements, whose time grows with the rows, and
    ``commit_s`` to commit, which does not: the statements get what ``STEP_S`` leaves
    after the commit. Cheaper steps, not longer ones: where the commit alone takes
    ``STEP_S`` (a busy disk), ``MIN_STEP`` (giving the statements a share of a slow
    commit grew the claims' p99 during a prune: bench/README.md session 21). The rows
    at most twice the last step's (one quick sample does not make a long step), at most
    ``left``."""
    budget = max(STEP_S - commit_s, 0.0)
    fits = int(rows * budget / max(statements_s, 1e-6))
    return max(1, min(left, 2 * rows, max(MIN_STEP, fits)))


def checkpoints_deferred(conn: sa.Connection) -> tuple[Any, int] | None:
    """SQLite: ``conn``'s commits stop checkpointing the WAL (copying it into the database
    and syncing that, inside the commit: the longest of a step's holds of the writer gate,
    bench/README.md session 22). Its driver connection and the setting to restore with
    :func:`restore_checkpoints` once the step's transaction has ended; None without a WAL
    (an in-memory database: nothing to checkpoint)."""
    driver = conn.connection.dbapi_connection
    if driver.execute("PRAGMA journal_mode").fetchone()[0] != "wal":  # type: ignore[union-attr]
        return None
    pages = int(driver.execute("PRAGMA wal_autocheckpoint").fetchone()[0])  # type: ignore[union-attr]
    driver.execute("PRAGMA wal_autocheckpoint = 0")  # type: ignore[union-attr]
    return driver, pages


def restore_checkpoints(driver: Any, pages: int) -> None:
    """Undo :func:`checkpoints_deferred` (on the driver connection, whether or not the
    session kept it after the transaction)."""
    driver.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def checkpoint(engine: sa.Engine) -> None:
    """SQLite: copy what the WAL holds into the database, outside the writer gate (a
    passive checkpoint waits for no one, and writers go on appending meanwhile), on a
    connection of the pool with no transaction open."""
    with engine.connect() as conn:
        conn.connection.dbapi_connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()  # type: ignore[union-attr]


def forget(tx: Tx, ids: Sequence[int], *, requests_before: int) -> int:
    """Delete what belongs to the occurrences ``ids`` (being deleted in ``tx``): controls,
    grants, asks, reservations, notifications, events, and operator requests made before
    ``requests_before``. Returns how many events went.

    The rows other than events seldom exist for settled runs: one probe asks for all of
    them, and their six deletes are sent only when it finds one (a step of a prune holds
    SQLite's writer lock, and each statement is a share of its fixed cost)."""
    params = {"ids": st.ids_param(tx.dialect, ids)}
    if st.NAMED_BY_PRUNED[tx.dialect].all(tx.conn, params)[0].named:
        for statement in st.FORGET_OCCURRENCE_ROWS:
            statement[tx.dialect].execute(tx.conn, params)
        st.FORGET_OCCURRENCE_REQUESTS[tx.dialect].execute(
            tx.conn, {**params, "requests_before": requests_before}
        )
    return st.FORGET_OCCURRENCE_EVENTS[tx.dialect].execute(tx.conn, params)


def prune(
    tx: Tx, *, settled_before: int, limit: int, statuses: tuple[str, ...] = PRUNABLE
) -> dict[str, int]:
    """Delete history of ``statuses`` (some of PRUNABLE) settled before ``settled_before``,
    at most ``limit`` occurrences, each status's oldest first: one seek per status on
    ``occurrences_prunable``, never a sort of all the history a status has. With
    ``succeeded``, chords with an empty header closed before then go too (at most
    ``limit``): no member of theirs is ever pruned to take their rows along."""
    ids: list[int] = []
    for status in (s for s in statuses if s in PRUNABLE):
        params = {"status": str(status), "settled_before": settled_before}
        oldest = st.OLDEST_PRUNABLE.all(tx.conn, {**params, "limit": limit - len(ids)})
        ids += [row[0] for row in oldest]
        if len(ids) >= limit:
            break
    their_chords: list[str | None] = []
    if OccurrenceStatus.SUCCEEDED in statuses:
        empty = {"closed_before": settled_before, "limit": limit}
        their_chords += [row[0] for row in st.EMPTY_CHORDS.all(tx.conn, empty)]
    if not ids and not their_chords:
        return {"occurrences": 0, "events": 0}
    pruned = pruned_events = 0
    if ids:
        pruned_events = forget(tx, ids, requests_before=settled_before)
        given = {"ids": st.ids_param(tx.dialect, ids)}
        their_chords += [row[0] for row in st.CHORDS_OF_RUNS[tx.dialect].all(tx.conn, given)]
        pruned = st.DELETE_OCCURRENCES[tx.dialect].execute(tx.conn, given)
    tx.emit(
        EventType.HISTORY_PRUNED,
        occurrences=pruned,
        events=pruned_events,
        chords=forget_chords(tx, their_chords),
        settled_before=settled_before,
        statuses=list(statuses),
    )
    return {"occurrences": pruned, "events": pruned_events}


def forget_chords(tx: Tx, chord_ids: Sequence[str | None]) -> int:
    """Delete the rows of the chords ``chord_ids`` (those of runs just deleted in ``tx``)
    that are done and have no member left (RETENTION_FORGETS_CHORDS); how many went. The
    chords table then stays as large as the history that names its rows."""
    named = sorted({c for c in chord_ids if c is not None})
    if not named:
        return 0
    tx.conn.execute(st.LOCK_CHORDS, {"chord_ids": named})
    return door.run_count(tx, RETENTION_FORGETS_CHORDS, {"chord_ids": named})
