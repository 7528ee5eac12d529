"""Enqueue throughput: ``celery_app.enqueue`` beside ``Task.delay()`` and two PostgreSQL queues.

What a web request pays to hand work off, one caller, no worker running:

* ``celery Task.delay()``: a stock Celery app (``bench/stock_app.py``) publishing to
  Redis: the baseline, what a user pays today (no durability beyond the broker's).
* ``kernel SQLite`` / ``kernel PostgreSQL``: ``enqueue(app, task, [key])`` — one
  committed occurrence (one INSERT ... SELECT plus its event, ``synchronous=FULL`` /
  ``fsync`` on) and then the hint published to the same Redis; ``bulk``:
  ``enqueue_many`` of ``--batch`` runs, one statement per batch, hints batched.
* ``floor SQLite`` / ``floor PostgreSQL``: what durability alone costs one enqueue on this
  machine, in the same run: one row inserted as its own durable transaction on the bare
  driver beside the kernel's database (``bench/floor.py``'s ``inserter``: no kernel, no
  SQLAlchemy, no hint). A ``/delay()`` ratio the floor itself does not reach is one no
  enqueue that commits before it answers can; the table ends with kernel ÷ floor.
* ``floor-sql SQLite`` / ``floor-sql PostgreSQL``: the kernel's own write of one enqueued run
  (PostgreSQL: its one statement — the occurrence, its event, the job held ``FOR KEY
  SHARE``; SQLite: its insert and its event's statement in one ``BEGIN IMMEDIATE``),
  rendered once and sent on the bare driver, durable, with the values the kernel gives them
  for this task: nothing of the kernel's Python, no hint. ``..., then delay()``: that write,
  then a stock ``delay()`` — a commit of the kernel's row and one Celery publish, the least
  any enqueue that commits its row and then publishes its hint through Celery in the caller
  can cost; the table ends with kernel ÷ that pair.
* ``kernel PostgreSQL, caller's tx``: the same insert inside the caller's own psycopg
  transaction, committed by the caller (no hint: the pump's).
* ``procrastinate defer`` (``defer_async``; bulk ``batch_defer_async``) and ``PgQueuer
  enqueue`` (one job; bulk: lists) on the same PostgreSQL, each at its default
  durability, schemas installed by their ``bench/peers/`` drivers.

Beside each rate, ``CPU µs``: this process's CPU per call (per row in bulk), which the
machine's other load moves far less than the rates (the servers' CPU is not in it).

Run from the repository root, after ``pip install -e '.[bench]'`` (a couple of minutes)::

    .venv/bin/python bench/enqueue.py
    .venv/bin/python bench/enqueue.py --single 300 --bulk 2000   # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402
from bench.support import fresh_database, peer_servers, servers  # noqa: E402

__all__ = ["main"]

TASK = "bench.enqueue_noop"
DRIVERS = ROOT / "bench" / "peers"


#: One measurement: (calls or rows per second, CPU µs of this process per call or row).
Measured = tuple[float, float]


@dataclass
class Row:
    system: str
    mode: str
    rates: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def add(self, measured: Measured) -> None:
        self.rates.append(measured[0])
        self.cpus.append(measured[1])

    @property
    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus) if self.cpus else 0.0


#: Seconds one measurement runs at most (set by --seconds): the run stays a few minutes.
BUDGET = [4.0]


def _timed(calls: int, run: Callable[[int], object], per_call: int = 1) -> Measured:
    """Calls per second (times ``per_call``) of ``run(i)`` for ``i`` in ``range(calls)``,
    stopping early when the measurement's time budget is spent, and this process's CPU
    per call (per row: ``per_call``), which the machine's other load moves far less."""
    started, cpu = time.perf_counter(), time.process_time()
    deadline = started + BUDGET[0]
    done = 0
    for i in range(calls):
        run(i)
        done += 1
        if time.perf_counter() >= deadline:
            break
    return _measured(done * per_call, started, cpu)


def _measured(items: int, started: float, cpu: float) -> Measured:
    return (
        items / (time.perf_counter() - started),
        (time.process_time() - cpu) * 1e6 / items,
    )


def _stock_delay(broker_url: str, calls: int) -> Measured:
    from bench.stock_app import app, stock_noop

    app.conf.broker_url = broker_url
    stock_noop.delay("warm")
    key = uuid.uuid4().hex
    with app.producer_or_acquire():  # one connection for the run, as a web worker holds one
        return _timed(calls, lambda i: stock_noop.delay(key))


def _noop(key: object) -> None:
    """The enqueued task's body (no worker runs here)."""


@contextmanager
def _kernel_app(broker_url: str, database_url: str, var_dir: Path) -> Iterator[Any]:
    from celery_app.factory import create_app

    app = create_app(
        "bench_enqueue",
        broker_url=broker_url,
        kernel_database_url=database_url,
        kernel_auto_migrate=True,
    )
    app.task(name=TASK)(_noop)
    try:
        yield app
    finally:
        client = getattr(app, "_kernel_enqueue_client", None)
        if client is not None:
            client.kernel.close()


def _kernel(app: Any, calls: int, batch: int) -> tuple[Measured, Measured]:
    """(single enqueues/s, bulk enqueues/s) through ``app``'s kernel."""
    from celery_app import enqueue, enqueue_many

    enqueue(app, TASK, ["warm"])  # opens the kernel, defines the task's job
    single = _timed(calls, lambda i: enqueue(app, TASK, [i]))
    runs = [{"task": TASK, "args": [i]} for i in range(batch)]
    rounds = max(1, calls * 10 // batch)
    bulk = _timed(rounds, lambda i: enqueue_many(app, runs), per_call=batch)
    return single, bulk


def _floor(database_url: str, calls: int) -> Measured:
    """Durable single-row inserts/s on the bare driver beside the kernel at ``database_url``."""
    database = floor.database_beside(database_url)
    floor.prepare(database)
    insert, close = floor.inserter(database)
    try:
        insert(-1)
        return _timed(calls, insert)
    finally:
        close()


def _kernel_statements(app: Any, database_url: str) -> tuple[Callable[[int], None], Any]:
    """The kernel's durable write of one enqueued run on the bare driver, at ``database_url``
    (the kernel's database, where ``app``'s enqueue of ``TASK`` defined its job): a call
    ``i`` writes one run of ``TASK`` with a generated key of its own, as the kernel would
    for ``enqueue(app, TASK, [0])``; and the driver's connection. PostgreSQL: the kernel's
    one statement (the occurrence, its event, the job held ``FOR KEY SHARE``) in
    autocommit; SQLite: the kernel's insert and its event's statement in one ``BEGIN
    IMMEDIATE`` transaction, ``synchronous=FULL`` as the kernel opens it."""
    from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
    from sqlalchemy.dialects.sqlite import pysqlite

    from celery_app.enqueueing import _task_settings
    from kernel import EnqueueRequest
    from kernel.spec.enqueue_request import prepare
    from kernel.statements.enqueues import ENQUEUE_OCCURRENCE, LOG_ENQUEUED, enqueue_params

    postgres = database_url.startswith("postgresql")
    dialect = psycopg_dialect.dialect() if postgres else pysqlite.dialect()
    request = EnqueueRequest(TASK, args=[0], settings=_task_settings(app, TASK), queue="celery")
    row = prepare(request, {}, hinted=True)
    statement = ENQUEUE_OCCURRENCE[dialect.name].statement
    insert, log = (s.compile(dialect=dialect) for s in (statement, LOG_ENQUEUED.statement))
    # ``now`` None: PostgreSQL's statement reads the server's clock; SQLite's is given one.
    values = {**enqueue_params(dialect.name, [row.values]), "now": None}
    params = dict(insert.construct_params(values))
    run = uuid.uuid4().hex

    def keyed(i: int) -> dict[str, Any]:
        # A new generated key each call, as the kernel makes one (no existing key sought).
        params["trigger_key_0"] = trigger = f"enqueue:floor-sql-{run}-{i}"
        params["idempotency_key_0"] = f"{row.job_id}|{trigger}"
        return params

    connection, _ = floor.connect(servers().libpq_url(database_url) if postgres else database_url)
    if postgres:

        def write(i: int) -> None:
            if connection.execute(insert.string, keyed(i)).fetchone() is None:
                raise RuntimeError("the kernel's enqueue statement made no row")

        return write, connection

    log_params = dict(log.construct_params({"ids": "[]"}))
    id_at = [column.key for column in statement.exported_columns].index("id")  # type: ignore
    order = insert.positiontup or ()

    def write_sqlite(i: int) -> None:
        given = keyed(i)
        given["now"] = int(time.time() * 1000)
        connection.execute("BEGIN IMMEDIATE")
        made = connection.execute(insert.string, [given[n] for n in order]).fetchone()
        if made is None:
            raise RuntimeError("the kernel's enqueue statement made no row")
        log_params["ids"] = json.dumps([made[id_at]])
        connection.execute(log.string, [log_params[n] for n in log.positiontup or ()])
        connection.execute("COMMIT")

    return write_sqlite, connection


def _floor_sql(app: Any, database_url: str, calls: int) -> tuple[Measured, Measured]:
    """(the kernel's write of one enqueued run on the bare driver/s, the same then a stock
    ``delay()``/s) on the kernel's database at ``database_url``
    (:func:`_kernel_statements`)."""
    from bench.stock_app import app as stock
    from bench.stock_app import stock_noop

    write, connection = _kernel_statements(app, database_url)

    def then_delay(i: int) -> None:
        write(calls + i)  # keys of their own
        stock_noop.delay("floor-sql")

    stock.conf.broker_url = app.conf.broker_url
    try:
        write(-1)
        alone = _timed(calls, write)
        with stock.producer_or_acquire():  # as _stock_delay holds one
            return alone, _timed(calls, then_delay)
    finally:
        connection.close()


def _kernel_in_callers_tx(app: Any, pg_url: str, calls: int) -> Measured:
    from celery_app import enqueue

    with psycopg.connect(servers().libpq_url(app.conf.kernel_database_url)) as conn:

        def one(i: int) -> None:
            enqueue(app, TASK, [i], connection=conn)
            conn.commit()

        one(-1)
        return _timed(calls, one)


async def _timed_async(
    calls: int, run: Callable[[int], Awaitable[Any]], per_call: int = 1
) -> Measured:
    """:func:`_timed` for a coroutine per call."""
    started, cpu = time.perf_counter(), time.process_time()
    deadline = started + BUDGET[0]
    done = 0
    for i in range(calls):
        await run(i)
        done += 1
        if time.perf_counter() >= deadline:
            break
    return _measured(done * per_call, started, cpu)


def _install(driver: str, dsn: str, broker_url: str) -> None:
    subprocess.run(
        [sys.executable, str(DRIVERS / f"{driver}_driver.py"), "install", dsn],
        check=True,
        capture_output=True,
        timeout=120,
        env={"BENCH_REDIS_URL": broker_url, "PATH": "/usr/bin:/bin"},
    )


async def _procrastinate(dsn: str, calls: int, batch: int) -> tuple[Measured, Measured]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="bench_noop", queue="bench")
    async def noop(key: str) -> None: ...

    async with app.open_async():
        await noop.defer_async(key="warm")
        rows: list[dict[str, Any]] = [{"key": "k"} for _ in range(batch)]
        single = await _timed_async(calls, lambda i: noop.defer_async(key=str(i)))
        bulk = await _timed_async(
            max(1, calls * 10 // batch),
            lambda i: noop.batch_defer_async(*rows),
            per_call=batch,
        )
    return single, bulk


async def _pgqueuer(dsn: str, calls: int, batch: int) -> tuple[Measured, Measured]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(connection))
    await queries.enqueue("bench_noop", b"warm", 0)
    single = await _timed_async(calls, lambda i: queries.enqueue("bench_noop", b"%d" % i, 0))
    bulk = await _timed_async(
        max(1, calls * 10 // batch),
        lambda i: queries.enqueue(["bench_noop"] * batch, [b"k"] * batch, [0] * batch),
        per_call=batch,
    )
    await connection.close()
    return single, bulk


def _measure(args: argparse.Namespace, broker_url: str, pg_url: str, workdir: Path) -> list[Row]:
    rows = {
        key: Row(*key)
        for key in [
            ("celery Task.delay()", "single"),
            ("floor SQLite", "single"),
            ("kernel SQLite", "single"),
            ("kernel SQLite", f"bulk {args.batch}"),
            ("floor PostgreSQL", "single"),
            ("kernel PostgreSQL", "single"),
            ("kernel PostgreSQL", f"bulk {args.batch}"),
            ("floor-sql SQLite", "single"),
            ("floor-sql SQLite, then delay()", "single"),
            ("floor-sql PostgreSQL", "single"),
            ("floor-sql PostgreSQL, then delay()", "single"),
            ("kernel PostgreSQL, caller's tx", "single"),
            ("procrastinate defer", "single"),
            ("procrastinate defer", f"bulk {args.batch}"),
            ("PgQueuer enqueue", "single"),
            ("PgQueuer enqueue", f"bulk {args.batch}"),
        ]
    }
    bulk = f"bulk {args.batch}"
    for _ in range(args.repeat):
        rows["celery Task.delay()", "single"].add(_stock_delay(broker_url, args.single))
        for name, server_url in (("kernel SQLite", None), ("kernel PostgreSQL", pg_url)):
            with (
                fresh_database(server_url, "bench-enqueue-") as url,
                _kernel_app(broker_url, url, workdir) as app,
            ):
                single, many = _kernel(app, args.single, args.batch)
                rows[name, "single"].add(single)
                floor_name = name.replace("kernel", "floor")
                rows[floor_name, "single"].add(_floor(url, args.single))
                rows[name, bulk].add(many)
                alone, then_delay = _floor_sql(app, url, args.single)
                floor_sql = name.replace("kernel", "floor-sql")
                rows[floor_sql, "single"].add(alone)
                rows[f"{floor_sql}, then delay()", "single"].add(then_delay)
                if server_url is not None:
                    rate = _kernel_in_callers_tx(app, pg_url, args.single)
                    rows["kernel PostgreSQL, caller's tx", "single"].add(rate)
        for driver, name, measure in (
            ("procrastinate", "procrastinate defer", _procrastinate),
            ("pgqueuer", "PgQueuer enqueue", _pgqueuer),
        )[: 2 if args.peers else 0]:
            with fresh_database(pg_url, "bench-enqueue-") as url:
                dsn = servers().libpq_url(url)
                _install(driver, dsn, broker_url)
                single, many = asyncio.run(measure(dsn, args.single, args.batch))
                rows[name, "single"].add(single)
                rows[name, bulk].add(many)
    return [row for row in rows.values() if row.rates]


def _table(rows: list[Row]) -> str:
    base = rows[0].rate
    lines = [f"{'system':<36} {'mode':<9} {'enqueues/s':>10} {'/delay()':>9} {'CPU µs':>8}"]
    for row in rows:
        lines.append(
            f"{row.system:<36} {row.mode:<9} {row.rate:>10.0f} {row.rate / base:>9.2f}"
            f" {row.cpu:>8.0f}"
        )
    rate = {(row.system, row.mode): row.rate for row in rows}
    for back_end in ("SQLite", "PostgreSQL"):
        kernel = rate[f"kernel {back_end}", "single"]
        lines.append(
            f"kernel {back_end} single ÷ floor: {kernel / rate[f'floor {back_end}', 'single']:.2f}"
        )
        pair = rate[f"floor-sql {back_end}, then delay()", "single"]
        lines.append(f"kernel {back_end} single ÷ (floor-sql, then delay()): {kernel / pair:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--single", type=int, default=1000, help="single calls per run (1000)")
    parser.add_argument("--batch", type=int, default=500, help="runs per bulk call (500)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per system, median (3)")
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="seconds one measurement runs at most (4)"
    )
    parser.add_argument("--postgres-url", help="use this server instead of starting a durable one")
    parser.add_argument(
        "--no-peers", dest="peers", action="store_false",
        help="leave procrastinate and PgQueuer out (installed by '.[bench]')",
    )  # fmt: skip
    args = parser.parse_args(argv)
    BUDGET[0] = args.seconds
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the servers are stopped
    with peer_servers(args.postgres_url, "bench-enqueue-") as running:
        broker_url, pg_url, durability, workdir = running
        rows = _measure(args, broker_url, pg_url, workdir)
    print(
        f"\nup to {args.single} single calls and {args.single * 10} rows in bulk calls, at "
        f"most {args.seconds:g}s per measurement, median of {args.repeat}; one caller; Redis "
        f"broker; PostgreSQL {durability}; SQLite WAL synchronous=FULL"
    )
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
