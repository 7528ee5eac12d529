"""CPU per kernel operation in one process: what the kernel's own Python costs.

Wall-clock rates on a shared machine move with everyone else's load; the CPU this
process spends per operation (``time.process_time``) does not. For each back end (a
temporary SQLite file in WAL mode, and a durable PostgreSQL) it times, in one process
without Celery:

* ``floor-sql``: the kernel's claim and success statements sent on the bare driver
  (bench/raw_baseline.py, the same mirror bench/kernel_throughput.py uses);
* ``claim+succeed``: ``Kernel.claim`` then ``Kernel.succeed`` of one queued occurrence;
* ``succeed_and_claim``: a batch's step, settling one run and claiming the next;
* ``run_occurrence``: the worker's whole run of one occurrence without Celery
  (``celery_app.runtime.run_occurrence``: claim, a ``callable`` job's no-op body
  through its adapter, settle);
* ``enqueue``: one ``Kernel.enqueue`` (task, args, no key);
* ``enqueue_many/500``: ``Kernel.enqueue_many`` of 500 requests, per call.

Run from the repository root::

    .venv/bin/python bench/cpu_per_op.py                 # 2000 runs per operation
    .venv/bin/python bench/cpu_per_op.py --n 500 --backends sqlite
    .venv/bin/python bench/cpu_per_op.py --profile claim+succeed --backends sqlite

``--profile OP`` runs that operation under cProfile (CPU time) and prints its top entries (own
time) instead of the table.

Beside the CPU, each operation's round trips: on PostgreSQL the server's answers
(libpq's ``ReadyForQuery``, traced on every connection of the process for a few
untimed operations), on SQLite the statements sent (BEGIN and COMMIT included).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from adapters.registry import load_adapters  # noqa: E402
from bench.kernel_throughput import BUSY_TIMEOUT_MS, _prepare  # noqa: E402
from bench.raw_baseline import RawWorker  # noqa: E402
from bench.support import fresh_database, server  # noqa: E402
from celery_app.held_run import LeaseKeeper  # noqa: E402
from celery_app.runtime import run_occurrence  # noqa: E402
from kernel import EnqueueRequest, Kernel  # noqa: E402

__all__ = ["main"]

OWNER = "cpu-bench"
LEASE_S = 300.0
BULK = 500
OPS = (
    "floor-sql",
    "claim+succeed",
    "succeed_and_claim",
    "run_occurrence",
    "enqueue",
    "enqueue_many/500",
)
#: The job ``run_occurrence`` runs: a body that does nothing, through the callable adapter.
CALLABLE_JOB = {
    "id": "bench-callable",
    "kind": "callable",
    "payload": {"callable": "builtins:dict"},
    "overlap": "allow",
    "max_queued": 10_000,
    "max_attempts": 1,
}


#: Operations traced for the round-trip count (untimed, after the warm-up).
TRACED = 5


class RoundTrips:
    """Counts round trips of every connection this process opens after :meth:`install`:
    psycopg's by libpq's trace of the server's ``ReadyForQuery`` (one per answered
    query, pipelined or not), sqlite3's by its trace callback (one per statement)."""

    def __init__(self) -> None:
        self.pg: list[psycopg.Connection[Any]] = []
        self.lite: list[sqlite3.Connection] = []
        self.sqlite = 0

    def install(self) -> None:
        connect_pg = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
        connect_sqlite = sqlite3.connect

        def pg(cls: Any, *args: Any, **kwargs: Any) -> Any:
            conn = connect_pg(cls, *args, **kwargs)
            self.pg.append(conn)
            return conn

        def lite(*args: Any, **kwargs: Any) -> Any:
            conn = connect_sqlite(*args, **kwargs)
            self.lite.append(conn)
            return conn

        # Both names each module hands out (SQLAlchemy's dialects use psycopg.connect and
        # sqlite3.dbapi2.connect).
        psycopg.Connection.connect = classmethod(pg)  # type: ignore[method-assign,assignment]
        psycopg.connect = psycopg.Connection.connect
        sqlite3.connect = sqlite3.dbapi2.connect = lite

    def _statement(self, _sql: str) -> None:
        self.sqlite += 1

    def count(self, steps: Iterator[None], n: int) -> float:
        """Round trips per step over ``n`` steps."""
        live = [c for c in self.pg if not c.closed]
        lite = [c for c in self.lite if _open(c)]
        with tempfile.TemporaryFile() as out:
            for conn in live:
                conn.pgconn.trace(os.dup(out.fileno()))
            for db in lite:  # only now: a callback per statement costs CPU the table counts
                db.set_trace_callback(self._statement)
            self.sqlite = 0
            for _ in range(n):
                next(steps)
            for db in lite:
                db.set_trace_callback(None)
            for conn in live:
                conn.pgconn.untrace()  # flushes its trace
            out.seek(0)
            answers = out.read().count(b"\tReadyForQuery")
        return (answers + self.sqlite) / n


TRIPS = RoundTrips()


def _open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 - raises on a closed connection
    except sqlite3.ProgrammingError:
        return False
    return True


def _request(i: int) -> EnqueueRequest:
    return EnqueueRequest("bench.enqueued", [i], {})


def _steps(url: str, n: int) -> dict[str, tuple[int, Callable[[], Iterator[None]]]]:
    """Per operation: how many to time, and a generator doing one per ``next``."""
    m = n + TRACED  # each generator's steps: the timed ones, the traced ones, a warm-up
    ids = _prepare(url, 3 * m + 3, "NORMAL")
    kernel = Kernel.open(url, sqlite_synchronous="NORMAL", busy_timeout_ms=BUSY_TIMEOUT_MS)
    raw = RawWorker(url, "NORMAL", BUSY_TIMEOUT_MS)
    kernel.define_job(CALLABLE_JOB)
    run_ids = [
        kernel.run_now(CALLABLE_JOB["id"], request_id=f"r{i}", operator="bench").occurrence.id
        for i in range(m + 1)
    ]
    adapters = load_adapters()
    keeper = LeaseKeeper()
    floor_ids, pair_ids, chain_ids = ids[: m + 1], ids[m + 1 : 2 * m + 2], ids[2 * m + 2 :]

    def floor() -> Iterator[None]:
        for occ_id in floor_ids:
            raw.succeed(occ_id, OWNER, raw.claim(occ_id, OWNER, int(LEASE_S * 1000)))
            yield

    def pair() -> Iterator[None]:
        for occ_id in pair_ids:
            claim = kernel.claim(occ_id, owner=OWNER, lease=LEASE_S)
            assert claim is not None, occ_id
            kernel.succeed(occ_id, owner=OWNER, fence=claim.fence)
            yield

    def chain() -> Iterator[None]:
        held = kernel.claim(chain_ids[0], owner=OWNER, lease=LEASE_S)
        for occ_id, next_id in zip(chain_ids, chain_ids[1:], strict=False):
            assert held is not None, occ_id
            held = kernel.succeed_and_claim(
                occ_id, owner=OWNER, fence=held.fence, next_occurrence_id=next_id, lease=LEASE_S
            )
            yield

    def run() -> Iterator[None]:
        for occ_id in run_ids:
            outcome = run_occurrence(kernel, adapters, occ_id, main_pid=0, keeper=keeper)
            assert outcome.result == "succeeded", outcome
            yield

    def one() -> Iterator[None]:
        for i in range(m + 1):
            kernel.enqueue(task="bench.enqueued", args=[i])
            yield

    def bulk() -> Iterator[None]:
        while True:
            kernel.enqueue_many([_request(i) for i in range(BULK)])
            yield

    bulk_n = max(2, n // 100)
    return {
        "floor-sql": (n, floor),
        "claim+succeed": (n, pair),
        "succeed_and_claim": (n - 1, chain),
        "run_occurrence": (n, run),
        "enqueue": (n, one),
        "enqueue_many/500": (bulk_n, bulk),
    }


def _time(make: Callable[[], Iterator[None]], count: int) -> tuple[float, float]:
    """CPU µs per step, and round trips per step; the first step warms caches and
    connections, untimed, and :data:`TRACED` steps after the timed ones count round
    trips (psycopg prepares a statement on its fifth run: one-off trips, not counted)."""
    steps = make()
    next(steps)
    start = time.process_time()
    for _ in range(count):
        next(steps)
    cpu = (time.process_time() - start) / count * 1e6
    return cpu, TRIPS.count(steps, TRACED)


def _profile(make: Callable[[], Iterator[None]], count: int, top: int) -> str:
    steps = make()
    next(steps)
    profiler = cProfile.Profile(time.process_time)  # CPU, as the table: not the waits
    profiler.enable()
    for _ in range(count):
        next(steps)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2000, help="operations timed per row")
    parser.add_argument("--backends", nargs="+", choices=("sqlite", "postgres"),
                        default=["sqlite", "postgres"])  # fmt: skip
    parser.add_argument("--profile", choices=OPS, help="cProfile this operation instead")
    parser.add_argument("--top", type=int, default=25, help="profile entries shown")
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    TRIPS.install()
    table: dict[str, dict[str, tuple[float, float]]] = {}
    with ExitStack() as stack:
        pg_url = (
            stack.enter_context(server("postgres", args.postgres_url, durable=True))
            if "postgres" in args.backends
            else None
        )
        for backend in args.backends:
            with fresh_database(pg_url if backend == "postgres" else None, "cpu-bench-") as url:
                steps = _steps(url, args.n)
                if args.profile:
                    count, make = steps[args.profile]
                    print(f"== {backend}: {args.profile} x{count}")
                    print(_profile(make, count, args.top))
                    continue
                table[backend] = {op: _time(make, count) for op, (count, make) in steps.items()}
    if table:
        print(f"CPU µs per operation ({args.n} runs; enqueue_many per call of {BULK})")
        print(f"{'operation':<20}" + "".join(f"{b:>12}{'trips':>7}" for b in table))
        for op in OPS:
            print(
                f"{op:<20}"
                + "".join(f"{table[b][op][0]:>12.0f}{table[b][op][1]:>7.1f}" for b in table)
            )
        for b, row in table.items():
            over = row["claim+succeed"][0] - row["floor-sql"][0]
            print(f"{b}: claim+succeed over floor-sql {over:.0f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
