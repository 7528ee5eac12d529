"""Where a batch enqueue's server time goes, per part and per row (issue 42 item 2).

The statement ``Kernel.enqueue_many`` sends for ``--batch`` runs of one task, its rows
prepared by the kernel's own code, run in a transaction that is rolled back (each round
with fresh keys), against a migrated kernel database:

* PostgreSQL: ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` of it, each plan node's time and WAL
  (the parse of the rows' JSON text, the occurrences' INSERT with its indexes and
  ``ON CONFLICT``, the events' INSERT, the answer's joins); the batch's parameters and
  its definitions in bytes per row; the statement and its commit timed apart (a
  committed round).
* SQLite: the same statement timed by variants: the JSON text's parse alone
  (``json_each`` counted), the INSERT, the events' INSERT, and the commit.

Rounds: ``--rounds``, lowest / median per part, in ms per batch and µs per row.
``--grown N``: the PostgreSQL kernel holds N occurrences first (made by the same
``enqueue_many``), analysed and checkpointed: what the indexes' inserts cost on a grown
table, full-page images included.

Run from the repository root::

    .venv/bin/python bench/enqueue_explain.py
    .venv/bin/python bench/enqueue_explain.py --backends postgres --rounds 9
    .venv/bin/python bench/enqueue_explain.py --backends postgres --grown 50000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from bench.support import fresh_database, server  # noqa: E402
from kernel import EnqueueRequest, Kernel  # noqa: E402
from kernel.db import driver  # noqa: E402
from kernel.spec.enqueue_request import prepare  # noqa: E402
from kernel.statements import enqueues as st  # noqa: E402

__all__ = ["main"]

TASK = "bench.explained"


def _rows(batch: int) -> list[dict[str, Any]]:
    """``batch`` runs' statement values, prepared as ``enqueue_many`` prepares them."""
    specs: dict[str, dict[str, Any]] = {}
    encoded: dict[int, str] = {}
    return [
        prepare(EnqueueRequest(TASK, [i], {}), specs, True, encoded=encoded).values
        for i in range(batch)
    ]


def _nodes(plan: dict[str, Any], depth: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    yield depth, plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child, depth + 1)


def _label(node: dict[str, Any]) -> str:
    parts = [node.get("Subplan Name") or "", node["Node Type"], node.get("Relation Name") or ""]
    return " ".join(p for p in parts if p)


def _postgres(url: str, args: argparse.Namespace) -> None:
    kernel = Kernel.open(url, migrate_schema=True)
    kernel.enqueue(task=TASK, args=["warm"])  # defines the task's job
    _grow(kernel, args.grown)
    statement = st.enqueue_occurrences("postgresql", args.batch)
    found: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        found.setdefault(name, []).append(value)

    try:
        with kernel.engine.connect() as conn:
            rendered = statement.rendered(conn.dialect)
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            for _ in range(args.rounds):
                rows = _rows(args.batch)
                params = {**st.enqueue_params("postgresql", rows), "now": None}
                note("parameters' bytes per row", _bytes(params) / args.batch)
                note("definition bytes per row",
                     statistics.mean(len(r["definition"].encode()) for r in rows))  # fmt: skip
                sql_args = driver._args(rendered, params)
                cursor.execute(
                    f"EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) {rendered.sql}", sql_args
                )
                (explained,) = cursor.fetchone()[0]
                conn.connection.dbapi_connection.rollback()  # type: ignore[union-attr]
                note("statement (EXPLAIN's execution)", explained["Execution Time"])
                note("planning", explained["Planning Time"])
                for depth, node in _nodes(explained["Plan"]):
                    key = f"{'  ' * depth}{_label(node)}"
                    note(key, node["Actual Total Time"] * node.get("Actual Loops", 1))
                    if node.get("WAL Records"):
                        note(f"{key} WAL records", node["WAL Records"])
                        note(f"{key} WAL bytes", node["WAL Bytes"])
                        note(f"{key} WAL full-page images", node.get("WAL FPI", 0))
                rows = _rows(args.batch)
                params = {**st.enqueue_params("postgresql", rows), "now": None}
                sql_args = driver._args(rendered, params)
                started = time.perf_counter()
                cursor.execute(rendered.sql, sql_args)
                cursor.fetchall()
                executed = time.perf_counter()
                conn.connection.dbapi_connection.commit()  # type: ignore[union-attr]
                note("committed round: statement (wall)", (executed - started) * 1e3)
                note("committed round: COMMIT (wall)", (time.perf_counter() - executed) * 1e3)
    finally:
        kernel.close()
    _print("postgres", found, args.batch)


def _grow(kernel: Kernel, rows: int) -> None:
    """``rows`` more occurrences made by ``enqueue_many`` of 500, then the tables analysed
    and a checkpoint taken (a grown kernel as it stands after one)."""
    if not rows:
        return
    batch = [EnqueueRequest(TASK, [i], {}) for i in range(500)]
    for _ in range(-(-rows // 500)):
        kernel.enqueue_many(batch)
    with kernel.engine.connect() as conn:
        for statement in ("ANALYZE occurrences", "ANALYZE events", "CHECKPOINT"):
            conn.execute(sa.text(statement))
        conn.commit()


def _bytes(params: dict[str, Any]) -> int:
    """The bytes of a statement's text parameters (a batch's are all JSON texts)."""
    return sum(len(v.encode()) for v in params.values() if isinstance(v, str))


def _sqlite(url: str, args: argparse.Namespace) -> None:
    kernel = Kernel.open(url, migrate_schema=True)
    kernel.enqueue(task=TASK, args=["warm"])
    statement = st.enqueue_occurrences("sqlite", args.batch)
    found: dict[str, list[float]] = {}
    try:
        with kernel.engine.connect() as conn:
            rendered = statement.rendered(conn.dialect)
            logged = st.LOG_ENQUEUED.rendered(conn.dialect)
            dbapi: Any = conn.connection.dbapi_connection
            cursor = dbapi.cursor()

            def clock(name: str, call: Callable[..., Any], *given: Any) -> Any:
                started = time.perf_counter()
                answer = call(*given)
                found.setdefault(name, []).append((time.perf_counter() - started) * 1e3)
                return answer

            for _ in range(args.rounds):
                rows = _rows(args.batch)
                params = {**st.enqueue_params("sqlite", rows), "now": int(time.time() * 1000)}
                found.setdefault("parameters' bytes per row", []).append(
                    _bytes(params) / args.batch
                )
                given = (params["given"],)
                clock("parse alone: json_each + json_extract of a column", cursor.execute,
                      "SELECT count(*), sum(length(json_extract(value, '$[{}]'))) "
                      "FROM json_each(?)".format(st._ROW_COLUMNS.index("definition")),
                      given)  # fmt: skip
                clock("BEGIN", cursor.execute, "BEGIN IMMEDIATE")
                answer = clock("occurrences INSERT (its JSON read in)", cursor.execute,
                               rendered.sql, driver._args(rendered, params)).fetchall()  # fmt: skip
                ids = json.dumps(sorted(row[0] for row in answer))
                clock("events INSERT", cursor.execute, logged.sql,
                      driver._args(logged, {"ids": ids}))  # fmt: skip
                clock("COMMIT (synchronous=FULL)", dbapi.commit)
    finally:
        kernel.close()
    _print("sqlite", found, args.batch)


def _print(backend: str, found: dict[str, list[float]], batch: int) -> None:
    print(f"== {backend}: batch of {batch}; ms per batch (µs per row), lowest / median")
    for name, values in found.items():
        low, median = min(values), statistics.median(values)
        if name.endswith(("bytes", "records", "bytes per row", "images")):
            print(f"{name:<60} {low:>10.0f} / {median:>10.0f}")
        else:
            per_row = f"({low * 1e3 / batch:.1f} / {median * 1e3 / batch:.1f} µs a row)"
            print(f"{name:<60} {low:>8.2f} / {median:>8.2f} {per_row}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7, help="rounds (7)")
    parser.add_argument("--batch", type=int, default=500, help="rows per batch (500)")
    parser.add_argument(
        "--grown", type=int, default=0,
        help="PostgreSQL: occurrences made first, then ANALYZE and CHECKPOINT (0)",
    )  # fmt: skip
    parser.add_argument("--backends", nargs="+", choices=("sqlite", "postgres"),
                        default=["sqlite", "postgres"])  # fmt: skip
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        if "sqlite" in args.backends:
            _sqlite(stack.enter_context(fresh_database(None, "enqueue-explain-")), args)
        if "postgres" in args.backends:
            pg = stack.enter_context(server("postgres", args.postgres_url, durable=True))
            _postgres(stack.enter_context(fresh_database(pg, "enqueue-explain-")), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
