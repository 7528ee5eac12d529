"""Kernel occurrences against plain Celery tasks, through the same real workers on Redis.

For each kernel back end the product's ``celery -A celery_app worker -c 2 -P prefork``
(its settings, task events off as in Celery) serves these sides, taking turns:

* **kernel**: ``--n`` queued occurrences of a ``callable`` job are created up front
  (``Kernel.fire`` in batches), then handed out by ``Kernel.dispatch_batch`` and
  published as Beat's pump publishes them (``publish_hints``): a backlog, so in
  messages of up to ``kernel_batch_max`` (16) ids; the clock runs from the dispatch
  until ``Kernel.status()`` counts them all succeeded.
* **kernel-single**: the same with one id per message (the shallow case: each
  occurrence its own claim and settle transaction).
* **kernel+E**: as **kernel** through a second product worker started with ``-E``
  (task events on, as when Flower runs), on the same kernel.
* **plain**: ``--n`` ``bench.noop`` tasks on the first worker, no kernel, timed until
  their Redis counter reaches ``--n`` (no result backend).
* **floor**: as **plain**, each body between two durable single-row writes on the bare
  driver (``bench/floor.py``): the cheapest a shallow run with its two commits can be.
* **floor-sql** (PostgreSQL): as **kernel-single** up to the publish (the same
  occurrences, dispatched the same way), then one message per occurrence to a task
  that sends the kernel's own plain claim and plain success on the bare driver around
  the body (``bench/floor.py``): the decision's two statements with none of the
  kernel's Python or the worker's runtime.

* **stock** / **stock+E**: the same ``--n`` no-op tasks through a stock Celery app
  (``bench/stock_app.py``: Celery's defaults), without and with task events (``-E``,
  as Flower needs): what a user runs today, and the baseline of the ratios
  (kernel against stock, kernel+E against stock+E).

All bodies are the same single Redis ``INCR`` (``bench/counter.py``), so
``kernel/stock`` is the share of stock Celery's throughput the kernel keeps. Beside
each rate, the peak RSS and PSS of the worker serving it (main process and pool
children, VmRSS and smaps_rollup's Pss sampled every 0.2 s during the timed runs; PSS
counts a page the pool's processes share once in all), and per run the CPU time of that
worker's main process, of its pool, of this process and of the rest of the machine
(``/proc``): on a machine whose cores are busy, the rate follows the CPU a run costs
in all. Each side
is warmed up first; the table shows the median of ``--repeat`` runs. Beside it,
``pair ms`` is what the kernel adds per run, measured with the worker idle: one
``Kernel.claim`` + ``Kernel.succeed`` in this process, no Celery.

Run from the repository root::

    .venv/bin/python bench/end_to_end.py                        # 5000 per run, 3 runs
    .venv/bin/python bench/end_to_end.py --n 1000 --repeat 1 --backends sqlite
    .venv/bin/python bench/end_to_end.py --quick                # 300 per run, 1 run

Redis and PostgreSQL are started from ``tests/servers.py`` (as an unprivileged user
when run as root), on 127.0.0.1 and ephemeral ports, and stopped at the end;
PostgreSQL keeps its durable defaults (``fsync``, ``synchronous_commit`` on), and the
table's footer says so.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from celery import Celery

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402
from bench.e2e_report import (  # noqa: E402
    Sample,
    cpu_table,
    latency_table,
    rate_table,
    statements_table,
)
from bench.latency import probe  # noqa: E402
from bench.statement_stats import PRELOAD, StatementCost, StatementStats  # noqa: E402
from bench.stock_app import STAMP_TASK, STOCK_TASK  # noqa: E402
from bench.support import (  # noqa: E402
    CpuMeter,
    RssSampler,
    fresh_database,
    postgres_durability,
    server,
)
from bench.workers import (  # noqa: E402
    CeleryTasks,
    Worker,
    broker_db,
    publish,
    timeout_for,
    wait_until,
    worker_env,
)
from celery_app.hints import publish_hints  # noqa: E402
from kernel import DispatchHint, Kernel  # noqa: E402

__all__ = ["KernelRuns", "kernel_worker", "main", "stock_sides"]

BACKENDS = ("sqlite", "postgres")
SIDES = ("stock", "stock+E", "plain", "floor", "floor-sql", "kernel", "kernel-single", "kernel+E")
#: The pump's default ``kernel_batch_max``.
BATCH_MAX = 16
JOB_ID = "bench-noop"
FLOOR_SQL_JOB_ID = "bench-floor-sql"
STAMP_JOB_ID = "bench-stamp"
PAIR_OWNER = "bench-inline"
PAIRS = 1000
PLAIN_TASK = "bench.noop"  # bench/noop.py; not imported here, it registers on the product's app
#: The states a run has not left yet (status counts, uncapped).
UNSETTLED = ("queued", "running", "retry_wait", "paused", "awaiting_approval", "needs_adjudication")
FIRE_BATCH = 1000
WARMUP = 300
SETTINGS_MODULE = "bench_end_to_end_settings"
# Each worker its own Redis database: the product's (plain and kernel), stock, stock -E,
# the product's with -E (kernel+E).
PRODUCT_DB, STOCK_DB, STOCK_EVENTS_DB, PRODUCT_EVENTS_DB = 0, 1, 2, 3


class Occurrences:
    """Creates queued occurrences of one ``callable`` job, batch by batch, up front: the
    counter's ``bump`` (after ``sleep_ms`` when given), or ``body`` named."""

    def __init__(
        self,
        kernel: Kernel,
        counter_key: str,
        sleep_ms: int = 0,
        job_id: str = JOB_ID,
        body: str = "bench.counter:bump",
    ) -> None:
        self.kernel = kernel
        self.counter_key = counter_key
        self.job_id = job_id
        self.cursor: str | None = None
        self.made = 0
        kwargs: dict[str, Any] = {"key": counter_key}
        if sleep_ms:
            kwargs["sleep_ms"] = sleep_ms
        kernel.define_job(
            {
                "id": job_id,
                "kind": "callable",
                "schedule": None,
                "overlap": "allow",
                "max_queued": 10000,  # admission bounds the backlog under every policy
                "max_attempts": 1,
                "payload": {"callable": body, "kwargs": kwargs},
            }
        )

    def create(self, n: int) -> list[int]:
        at = self.kernel.now() - timedelta(seconds=1)
        ids: list[int] = []
        while len(ids) < n:
            keys = [f"e2e-{self.made + i}" for i in range(min(FIRE_BATCH, n - len(ids)))]
            report = self.kernel.fire(
                self.job_id,
                expected_revision=1,
                expected_cursor=self.cursor,
                firings=[(key, at) for key in keys],
                next_cursor=(f"after-{keys[-1]}", at),
            )
            if report.stale or len(report.created) != len(keys):
                raise RuntimeError(f"fire created {len(report.created)} of {len(keys)} occurrences")
            ids.extend(report.created)
            self.made += len(keys)
            self.cursor = f"after-{keys[-1]}"
        return ids


class KernelRuns:
    """Queued occurrences run through the product's worker, timed until the kernel settled them.

    Two sides on one kernel (with and without task events) share ``occurrences``, so
    that one job's cursor moves on; each counts its own bodies.
    """

    def __init__(
        self,
        kernel: Kernel,
        publisher: Celery,
        broker_url: str,
        worker: Worker,
        occurrences: Occurrences | None = None,
        batch_max: int = BATCH_MAX,
        stats: StatementStats | None = None,
    ) -> None:
        self.kernel = kernel
        self.stats = stats
        self.batch_max = batch_max
        self.publisher = publisher
        self.broker = redis.Redis.from_url(broker_url)
        self.worker = worker
        self.occurrences = occurrences or Occurrences(kernel, f"bench:kernel:{uuid.uuid4().hex}")
        self.rss_mb = self.pss_mb = 0.0
        self.cpu: CpuMeter | None = None  # the last run's
        self.statements: tuple[StatementCost, ...] = ()  # the last run's (pg_stat_statements)

    def run(self, n: int) -> float:
        failed_before = self._counts()["dead_letter"]
        before_bodies = self._bodies()
        ids = self.occurrences.create(n)
        cpu = self.cpu = CpuMeter(self.worker.pid)
        if self.stats is not None:
            self.stats.reset()
        with RssSampler([self.worker.pid]) as rss, cpu:
            started = self._pump(set(ids))
            # Kernel.status() scans the table: polling it all along would steal a core
            # from the workers. The body's counter is cheap and only runs ahead of the
            # settles by the runs in flight, so it says when to start asking the kernel.
            wait_until(
                lambda: self._bodies() - before_bodies >= n,
                self.worker.check_alive,
                timeout_for(n),
                f"{n} occurrences to run",
                detail=lambda: f"kernel status: {self._counts()}\n{self.worker.tail()}",
            )
            # Settled counts are capped (kernel.reads.COUNT_CAP) and a long run passes the
            # cap: every run's occurrences are made up front, so none left unsettled is the end.
            ended = wait_until(
                lambda: not any(self._counts()[state] for state in UNSETTLED),
                self.worker.check_alive,
                timeout_for(0),
                f"{n} occurrences to settle",
                detail=lambda: f"kernel status: {self._counts()}\n{self.worker.tail()}",
            )
        if self.stats is not None:
            self.statements = tuple(self.stats.read())
        self.rss_mb = max(self.rss_mb, rss.peak_mb)
        self.pss_mb = max(self.pss_mb, rss.peak_pss_mb)
        if self._counts()["dead_letter"] != failed_before:
            raise RuntimeError(f"runs dead-lettered: kernel status {self._counts()}")
        ran = self._bodies() - before_bodies
        if ran != n:  # every occurrence's body ran exactly once
            raise RuntimeError(f"{n} occurrences succeeded; the body ran {ran} times")
        return ended - started

    def _pump(self, ids: set[int]) -> float:
        """Hand ``ids`` out and publish them as Beat's pump does; returns when that began."""
        started = time.monotonic()
        hints = self.kernel.dispatch_batch(limit=len(ids), rehint_after=3600)
        if {hint.occurrence_id for hint in hints} != ids:
            raise RuntimeError(f"dispatch handed out {len(hints)} hints for {len(ids)} occurrences")
        self._publish(hints)
        return started

    def _publish(self, hints: list[DispatchHint]) -> None:
        with self.publisher.producer_or_acquire() as producer:
            publish_hints(
                self.publisher, producer, hints, batch_max=self.batch_max, hint_options={}
            )

    def start_one(self) -> float:
        """Make one occurrence claimable and hint it as the pump would: a latency probe's
        start, the instant its creation committed."""
        ids = self.occurrences.create(1)
        began = time.time()
        self._pump(set(ids))
        return began

    def pairs(self, n: int) -> float:
        """Claim and settle ``n`` occurrences in this process: the kernel's own cost per run."""
        ids = self.occurrences.create(n)
        started = time.monotonic()
        self.claim_and_succeed(ids)
        return time.monotonic() - started

    def claim_and_succeed(self, ids: list[int]) -> None:
        for occ_id in ids:
            claim = self.kernel.claim(occ_id, owner=PAIR_OWNER)
            if claim is None:
                raise RuntimeError(f"occurrence {occ_id} was not claimable")
            self.kernel.succeed(occ_id, owner=PAIR_OWNER, fence=claim.fence)

    def _bodies(self) -> int:
        return int(self.broker.get(self.occurrences.counter_key) or 0)

    def _counts(self) -> dict[str, int]:
        counts: dict[str, int] = self.kernel.status()["counts"]
        return counts


class KernelStatementRuns(KernelRuns):
    """**floor-sql**: occurrences created and dispatched as **kernel-single**'s, each then
    sent to ``bench/floor.py``'s task that claims and settles it with the kernel's own two
    statements on the bare driver (PostgreSQL)."""

    def __init__(self, *args: Any, body_args: Sequence[Any] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.body_args = list(body_args)

    def _publish(self, hints: list[DispatchHint]) -> None:
        key = self.occurrences.counter_key
        publish(
            self.publisher,
            floor.FLOOR_STATEMENTS_TASK,
            [[key, hint.occurrence_id, *self.body_args] for hint in hints],
        )


def kernel_worker(
    stack: ExitStack,
    broker_url: str,
    database_url: str,
    concurrency: int,
    extra: Sequence[str] = (),
) -> tuple[Kernel, Worker, Celery]:
    """The product's worker on ``database_url`` (SQLite FULL), its kernel and a publisher;
    ``extra`` are more worker options (``-E``)."""
    from celery_app.factory import create_app

    kernel = Kernel.open(database_url, migrate_schema=True, sqlite_synchronous="FULL")
    stack.callback(kernel.close)
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kernel-e2e-")))
    (workdir / f"{SETTINGS_MODULE}.py").write_text('imports = ["bench.noop", "bench.floor"]\n')
    floor_database = floor.database_beside(database_url)
    floor.prepare(floor_database)
    env = worker_env(
        workdir,
        broker_url,
        CELERY_CONFIG_MODULE=SETTINGS_MODULE,
        KERNEL_DATABASE_URL=database_url,
        BENCH_FLOOR_DATABASE=floor_database,  # bench/floor.py: FLOOR_DATABASE
        KERNEL_SQLITE_SYNCHRONOUS="FULL",
        KERNEL_VAR_DIR=str(workdir / "var"),
    )
    worker = Worker(workdir, env, concurrency, extra=extra)
    stack.callback(worker.stop)
    # The product's settings (serializers, events), publishing to the worker's broker.
    return kernel, worker, create_app("bench-publisher", broker_url=broker_url)


def stock_sides(
    stack: ExitStack, broker_url: str, concurrency: int, body_args: Sequence[Any] = ()
) -> dict[str, CeleryTasks]:
    """Stock Celery workers, without and with ``-E``, each on its own Redis database;
    ``body_args`` follow the counter's key in each task (``sleep_ms``)."""
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="celery-stock-")))
    sides = {}
    for side, db, extra in (("stock", STOCK_DB, ()), ("stock+E", STOCK_EVENTS_DB, ("-E",))):
        url = broker_db(broker_url, db)
        worker = Worker(workdir, worker_env(workdir, url), concurrency, "bench.stock_app", extra)
        stack.callback(worker.stop)
        publisher = Celery("bench-stock-publisher", broker=url)
        sides[side] = CeleryTasks(worker, publisher, url, STOCK_TASK, body_args)
        stack.callback(sides[side].close)
    return sides


def _measure(
    backend: str,
    database_url: str,
    broker_url: str,
    args: argparse.Namespace,
    report: Callable[[Sample], None],
    latencies: dict[tuple[str, str], list[float]],
) -> None:
    with ExitStack() as stack:
        url = broker_db(broker_url, PRODUCT_DB)
        kernel, worker, publisher = kernel_worker(stack, url, database_url, args.concurrency)
        stats = None
        if backend == "postgres":
            stats = StatementStats(database_url)
            stack.callback(stats.close)
        occurrences = Occurrences(kernel, f"bench:kernel:{uuid.uuid4().hex}", args.sleep_ms)
        kernel_runs = KernelRuns(kernel, publisher, url, worker, occurrences, stats=stats)
        body_args = [args.sleep_ms] if args.sleep_ms else []
        stock = stock_sides(stack, broker_url, args.concurrency, body_args)
        sides: dict[str, Any] = {
            **stock,
            "plain": CeleryTasks(worker, publisher, url, PLAIN_TASK, body_args),
            "floor": CeleryTasks(worker, publisher, url, floor.FLOOR_TASK, body_args),
            "kernel": kernel_runs,
            "kernel-single": KernelRuns(
                kernel, publisher, url, worker, occurrences, batch_max=1, stats=stats
            ),
        }
        if "kernel+E" in args.sides:
            events_url = broker_db(broker_url, PRODUCT_EVENTS_DB)
            _, events_worker, events_publisher = kernel_worker(
                stack, events_url, database_url, args.concurrency, ("-E",)
            )
            sides["kernel+E"] = KernelRuns(
                kernel, events_publisher, events_url, events_worker, occurrences, stats=stats
            )
        if backend == "postgres":  # SQLite's claim and success are not single statements
            # Its own job: its occurrences are never the kernel sides' to dispatch.
            floor_occurrences = Occurrences(
                kernel, f"bench:floor-sql:{uuid.uuid4().hex}", job_id=FLOOR_SQL_JOB_ID
            )
            sides["floor-sql"] = KernelStatementRuns(
                kernel, publisher, url, worker, floor_occurrences, stats=stats, body_args=body_args
            )
        chosen = tuple(side for side in args.sides if side in sides)
        for side in chosen:  # the first messages also wait for the workers to come up
            sides[side].run(args.warmup)
        for r in range(args.repeat):
            # Rotate which side goes first, so a drift in the machine hits all of them.
            for side in chosen[r % len(chosen) :] + chosen[: r % len(chosen)]:
                seconds = sides[side].run(args.n)
                run = sides[side]
                report(
                    Sample(
                        backend, side, args.n, seconds, run.rss_mb, run.pss_mb, run.cpu,
                        getattr(run, "statements", ()),
                    )
                )  # fmt: skip
            pairs = min(PAIRS, args.n)
            report(Sample(backend, "pair", pairs, kernel_runs.pairs(pairs)))
        if args.latency:
            _latency(backend, kernel, publisher, url, worker, stock["stock"], args, latencies)


def _latency(
    backend: str,
    kernel: Kernel,
    publisher: Celery,
    url: str,
    worker: Worker,
    stock: CeleryTasks,
    args: argparse.Namespace,
    latencies: dict[tuple[str, str], list[float]],
) -> None:
    """``args.latency`` probes each of stock's ``send_task`` and the kernel's single hint, on
    idle workers: from the start to the body's stamp."""
    stock_key, kernel_key = (f"bench:stamp:{uuid.uuid4().hex}" for _ in range(2))

    def stock_start() -> float:
        began = time.time()
        stock.publisher.send_task(STAMP_TASK, args=[stock_key])
        return began

    stamps = Occurrences(kernel, kernel_key, job_id=STAMP_JOB_ID, body="bench.counter:stamp")
    runs = KernelRuns(kernel, publisher, url, worker, stamps, batch_max=1)
    latencies[(backend, "stock")] = probe(
        stock_start, stock.broker, stock_key, args.latency, stock.worker.check_alive
    )
    latencies[(backend, "kernel")] = probe(
        runs.start_one, runs.broker, kernel_key, args.latency, worker.check_alive
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, help="messages per timed run (default 5000)")
    parser.add_argument("--repeat", type=int, help="timed runs per side; the table shows medians")
    parser.add_argument("--quick", action="store_true", help="300 per run, 1 run, unless given")
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated kernel back ends (default sqlite,postgres)",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--postgres-url", help="use this server instead of starting a durable one")
    parser.add_argument(
        "--body", default="noop", help="noop (default) or sleep:N, an I/O body of N ms"
    )
    parser.add_argument(
        "--sides", default=",".join(SIDES), help=f"comma-separated (default {','.join(SIDES)})"
    )
    parser.add_argument(
        "--latency",
        type=int,
        default=0,
        metavar="PROBES",
        help="also probe claimable -> started on the idle worker PROBES times (stock: send_task)",
    )
    parser.add_argument(
        "--pg-stat-statements",
        action="store_true",
        help="start PostgreSQL with pg_stat_statements and show each kernel run's statements",
    )
    args = parser.parse_args(argv)
    body = args.body.split(":", 1)
    if body[0] not in ("noop", "sleep") or (body[0] == "sleep") != (len(body) == 2):
        parser.error("--body: noop or sleep:N")
    args.sleep_ms = int(body[1]) if len(body) == 2 else 0
    args.sides = tuple(side.strip() for side in args.sides.split(",") if side.strip())
    if not args.sides or set(args.sides) - set(SIDES) or "stock" not in args.sides:
        parser.error(f"--sides: stock and any of {', '.join(SIDES)}")
    args.n = args.n or (300 if args.quick else 5000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.warmup = min(WARMUP, args.n)
    # Stopped with SIGTERM, still stop the servers and the workers we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or set(backends) - set(BACKENDS):
        parser.error(f"--backends: choose from {', '.join(BACKENDS)}")
    samples: list[Sample] = []
    latencies: dict[tuple[str, str], list[float]] = {}

    def report(sample: Sample) -> None:
        samples.append(sample)
        print(
            f"{sample.backend:<10} {sample.side:<13} {sample.rate:8.0f}/s "
            f"({sample.n} in {sample.seconds:.2f}s)  RSS {sample.rss_mb:.1f} MB "
            f"PSS {sample.pss_mb:.1f} MB",
            flush=True,
        )

    durability = ["sqlite: WAL, synchronous=FULL"]
    with ExitStack() as stack:
        broker_url = stack.enter_context(server("redis"))
        pg_url = None
        if "postgres" in backends:
            settings = PRELOAD if args.pg_stat_statements else None
            pg_url = stack.enter_context(
                server("postgres", args.postgres_url, durable=True, settings=settings)
            )
            durability.append(f"postgres: {postgres_durability(pg_url)}")
        for backend in backends:
            server_url = pg_url if backend == "postgres" else None
            with fresh_database(server_url, "kernel-e2e-db-") as database_url:
                _measure(backend, database_url, broker_url, args, report, latencies)
    print()
    print(
        f"{args.n} runs of body {args.body} per timed run, {args.concurrency} prefork processes, "
        f"Redis broker; median of {args.repeat}; {'; '.join(durability)}"
    )
    print("stock = Celery's defaults (bench/stock_app.py), stock+E = the same with -E;")
    print("plain = the product's app without the kernel; RSS / PSS = worker peak, main + pool")
    print(rate_table(samples, args.sides, args.sleep_ms))
    print()
    print("CPU ms per run: the worker's main process (consumer), its pool, this process")
    print("(publishing, polling), the rest of the machine (Redis, PostgreSQL); +stock = total")
    print("less stock's; pool cs = the pool's context switches per run; busy = the machine's")
    print("busy share of its cores over the timed run")
    print(cpu_table(samples))
    if any(s.statements for s in samples):
        print()
        print("pg_stat_statements per run (kernel sides; the bench's dispatch and polls included)")
        print(statements_table(samples))
    if latencies:
        print()
        print("latency, idle worker: kernel = occurrence committed -> pump's dispatch + publish ->")
        print("body started; stock = send_task -> body started")
        print(latency_table(latencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
