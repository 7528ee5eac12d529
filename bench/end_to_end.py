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
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from celery import Celery

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.stock_app import STOCK_TASK  # noqa: E402
from bench.support import CpuMeter, RssSampler, fresh_database, postgres_durability, server  # noqa: E402
from bench.workers import (  # noqa: E402
    CeleryTasks,
    Worker,
    broker_db,
    timeout_for,
    wait_until,
    worker_env,
)
from celery_app.beat.firings import publish_hints  # noqa: E402
from kernel import Kernel  # noqa: E402

__all__ = ["KernelRuns", "kernel_worker", "main", "stock_sides"]

BACKENDS = ("sqlite", "postgres")
SIDES = ("stock", "stock+E", "plain", "kernel", "kernel-single", "kernel+E")
#: The pump's default ``kernel_batch_max``.
BATCH_MAX = 16
JOB_ID = "bench-noop"
PAIR_OWNER = "bench-inline"
PAIRS = 1000
PLAIN_TASK = "bench.noop"  # bench/noop.py; not imported here, it registers on the product's app
FIRE_BATCH = 1000
WARMUP = 300
SETTINGS_MODULE = "bench_end_to_end_settings"
# Each worker its own Redis database: the product's (plain and kernel), stock, stock -E,
# the product's with -E (kernel+E).
PRODUCT_DB, STOCK_DB, STOCK_EVENTS_DB, PRODUCT_EVENTS_DB = 0, 1, 2, 3


@dataclass(frozen=True)
class Sample:
    backend: str
    side: str
    n: int
    seconds: float
    rss_mb: float = 0.0
    pss_mb: float = 0.0
    cpu: CpuMeter | None = None

    @property
    def rate(self) -> float:
        return self.n / self.seconds


class Occurrences:
    """Creates queued occurrences of one no-op ``callable`` job, batch by batch, up front."""

    def __init__(self, kernel: Kernel, counter_key: str) -> None:
        self.kernel = kernel
        self.counter_key = counter_key
        self.cursor: str | None = None
        self.made = 0
        kernel.define_job(
            {
                "id": JOB_ID,
                "kind": "callable",
                "schedule": None,
                "overlap": "allow",
                "max_queued": 10000,  # admission bounds the backlog under every policy
                "max_attempts": 1,
                "payload": {"callable": "bench.counter:bump", "kwargs": {"key": counter_key}},
            }
        )

    def create(self, n: int) -> list[int]:
        at = self.kernel.now() - timedelta(seconds=1)
        ids: list[int] = []
        while len(ids) < n:
            keys = [f"e2e-{self.made + i}" for i in range(min(FIRE_BATCH, n - len(ids)))]
            report = self.kernel.fire(
                JOB_ID,
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
    ) -> None:
        self.kernel = kernel
        self.batch_max = batch_max
        self.publisher = publisher
        self.broker = redis.Redis.from_url(broker_url)
        self.worker = worker
        self.occurrences = occurrences or Occurrences(kernel, f"bench:kernel:{uuid.uuid4().hex}")
        self.rss_mb = self.pss_mb = 0.0
        self.cpu: CpuMeter | None = None  # the last run's

    def run(self, n: int) -> float:
        before = self._counts()["succeeded"]
        before_bodies = self._bodies()
        ids = self.occurrences.create(n)
        cpu = self.cpu = CpuMeter(self.worker.pid)
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
            ended = wait_until(
                lambda: self._counts()["succeeded"] - before >= n,
                self.worker.check_alive,
                timeout_for(0),
                f"{n} occurrences to succeed",
                detail=lambda: f"kernel status: {self._counts()}\n{self.worker.tail()}",
            )
        self.rss_mb = max(self.rss_mb, rss.peak_mb)
        self.pss_mb = max(self.pss_mb, rss.peak_pss_mb)
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
        with self.publisher.producer_or_acquire() as producer:
            publish_hints(
                self.publisher, producer, hints, batch_max=self.batch_max, hint_options={}
            )
        return started

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
    (workdir / f"{SETTINGS_MODULE}.py").write_text('imports = ["bench.noop"]\n')
    env = worker_env(
        workdir,
        broker_url,
        CELERY_CONFIG_MODULE=SETTINGS_MODULE,
        KERNEL_DATABASE_URL=database_url,
        KERNEL_SQLITE_SYNCHRONOUS="FULL",
        KERNEL_VAR_DIR=str(workdir / "var"),
    )
    worker = Worker(workdir, env, concurrency, extra=extra)
    stack.callback(worker.stop)
    # The product's settings (serializers, events), publishing to the worker's broker.
    return kernel, worker, create_app("bench-publisher", broker_url=broker_url)


def stock_sides(stack: ExitStack, broker_url: str, concurrency: int) -> dict[str, CeleryTasks]:
    """Stock Celery workers, without and with ``-E``, each on its own Redis database."""
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="celery-stock-")))
    sides = {}
    for side, db, extra in (("stock", STOCK_DB, ()), ("stock+E", STOCK_EVENTS_DB, ("-E",))):
        url = broker_db(broker_url, db)
        worker = Worker(workdir, worker_env(workdir, url), concurrency, "bench.stock_app", extra)
        stack.callback(worker.stop)
        publisher = Celery("bench-stock-publisher", broker=url)
        sides[side] = CeleryTasks(worker, publisher, url, STOCK_TASK)
        stack.callback(sides[side].close)
    return sides


def _measure(
    backend: str,
    database_url: str,
    broker_url: str,
    args: argparse.Namespace,
    report: Callable[[Sample], None],
) -> None:
    with ExitStack() as stack:
        url = broker_db(broker_url, PRODUCT_DB)
        kernel, worker, publisher = kernel_worker(stack, url, database_url, args.concurrency)
        kernel_runs = KernelRuns(kernel, publisher, url, worker)
        events_url = broker_db(broker_url, PRODUCT_EVENTS_DB)
        _, events_worker, events_publisher = kernel_worker(
            stack, events_url, database_url, args.concurrency, ("-E",)
        )
        sides: dict[str, Any] = {
            **stock_sides(stack, broker_url, args.concurrency),
            "plain": CeleryTasks(worker, publisher, url, PLAIN_TASK),
            "kernel": kernel_runs,
            "kernel-single": KernelRuns(
                kernel, publisher, url, worker, kernel_runs.occurrences, batch_max=1
            ),
            "kernel+E": KernelRuns(
                kernel, events_publisher, events_url, events_worker, kernel_runs.occurrences
            ),
        }
        for side in SIDES:  # the first messages also wait for the workers to come up
            sides[side].run(args.warmup)
        for r in range(args.repeat):
            # Rotate which side goes first, so a drift in the machine hits all of them.
            for side in SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]:
                seconds = sides[side].run(args.n)
                run = sides[side]
                report(Sample(backend, side, args.n, seconds, run.rss_mb, run.pss_mb, run.cpu))
            pairs = min(PAIRS, args.n)
            report(Sample(backend, "pair", pairs, kernel_runs.pairs(pairs)))


def _table(samples: list[Sample]) -> str:
    """Median rate and peak RSS / PSS per (backend, side); ratios of the medians to stock Celery."""
    rates: dict[tuple[str, str], list[float]] = {}
    rss: dict[tuple[str, str], float] = {}
    pss: dict[tuple[str, str], float] = {}
    for s in samples:
        key = (s.backend, s.side)
        rates.setdefault(key, []).append(s.rate)
        rss[key] = max(rss.get(key, 0.0), s.rss_mb)
        pss[key] = max(pss.get(key, 0.0), s.pss_mb)
    rows = [
        f"{'backend':<9} {'side':<13} {'per s':>7} {'/stock':>7} {'/stock+E':>9} "
        f"{'RSS MB':>7} {'RSS-stock':>10} {'PSS MB':>7} {'PSS-stock':>10}"
    ]
    for backend in dict.fromkeys(s.backend for s in samples):

        def median(side: str, backend: str = backend) -> float:
            return statistics.median(rates.get((backend, side)) or [0.0])

        stock, events = median("stock"), median("stock+E")
        for side in SIDES:
            rate, key = median(side), (backend, side)
            vs = [f"{rate / base:.2f}" if rate and base else "-" for base in (stock, events)]
            extra_rss = rss.get(key, 0.0) - rss.get((backend, "stock"), 0.0)
            extra_pss = pss.get(key, 0.0) - pss.get((backend, "stock"), 0.0)
            rows.append(
                f"{backend:<9} {side:<13} {rate:>7.0f} {vs[0]:>7} {vs[1]:>9} "
                f"{rss.get(key, 0.0):>7.1f} {extra_rss:>+10.1f} {pss.get(key, 0.0):>7.1f} "
                f"{extra_pss:>+10.1f}"
            )
        pair = median("pair")
        rows.append(f"{backend:<9} {'pair ms':<13} {1000 / pair if pair else 0:>7.2f}")
        backlog, single = median("kernel") / stock if stock else 0, median("kernel-single")
        single = single / stock if stock else 0
        extra_mb = pss.get((backend, "kernel"), 0.0) - pss.get((backend, "stock"), 0.0)
        verdicts = [
            _verdict(f"kernel >= {BACKLOG_TARGET} x stock", backlog >= BACKLOG_TARGET),
            _verdict(
                f"kernel-single >= {SINGLE_TARGET[backend]} x stock",
                single >= SINGLE_TARGET[backend],
            ),
            _verdict(f"kernel PSS <= stock + {PSS_TARGET_MB} MB", extra_mb <= PSS_TARGET_MB),
        ]
        rows.append(f"{backend:<9} {'targets':<13} " + "; ".join(verdicts))
    return "\n".join(rows)


CPU_PARTS = ("main", "pool", "bench", "others")


def _cpu_table(samples: list[Sample]) -> str:
    """Median CPU ms per run by part, and how busy the machine was, per (backend, side)."""
    rows = [
        f"{'backend':<9} {'side':<13} "
        + " ".join(f"{part:>7}" for part in CPU_PARTS)
        + f" {'total':>7} {'busy':>6}"
    ]
    keys = dict.fromkeys((s.backend, s.side) for s in samples if s.cpu and s.cpu.parts)
    for backend, side in keys:
        runs = [s for s in samples if (s.backend, s.side) == (backend, side) and s.cpu]
        per_run = {
            part: statistics.median(1000 * s.cpu.parts[part] / s.n for s in runs if s.cpu)
            for part in CPU_PARTS
        }
        busy = statistics.median(s.cpu.busy_share for s in runs if s.cpu)
        rows.append(
            f"{backend:<9} {side:<13} "
            + " ".join(f"{per_run[part]:>7.2f}" for part in CPU_PARTS)
            + f" {sum(per_run.values()):>7.2f} {busy:>6.0%}"
        )
    return "\n".join(rows)


#: Issue 22's no-op targets: the backlog's and the shallow case's rate against stock
#: Celery, the worker's extra memory as PSS.
BACKLOG_TARGET = 1.0
SINGLE_TARGET = {"sqlite": 0.65, "postgres": 0.55}
PSS_TARGET_MB = 40


def _verdict(target: str, met: bool) -> str:
    return f"{target}: {'met' if met else 'NOT met'}"


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
    args = parser.parse_args(argv)
    args.n = args.n or (300 if args.quick else 5000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.warmup = min(WARMUP, args.n)
    # Stopped with SIGTERM, still stop the servers and the workers we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or set(backends) - set(BACKENDS):
        parser.error(f"--backends: choose from {', '.join(BACKENDS)}")
    samples: list[Sample] = []

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
            pg_url = stack.enter_context(server("postgres", args.postgres_url, durable=True))
            durability.append(f"postgres: {postgres_durability(pg_url)}")
        for backend in backends:
            server_url = pg_url if backend == "postgres" else None
            with fresh_database(server_url, "kernel-e2e-db-") as database_url:
                _measure(backend, database_url, broker_url, args, report)
    print()
    print(
        f"{args.n} no-op runs per timed run, {args.concurrency} prefork processes, Redis broker; "
        f"median of {args.repeat}; {'; '.join(durability)}"
    )
    print("stock = Celery's defaults (bench/stock_app.py), stock+E = the same with -E;")
    print("plain = the product's app without the kernel; RSS / PSS = worker peak, main + pool")
    print(_table(samples))
    print()
    print("CPU ms per run: the worker's main process (consumer), its pool, this process")
    print("(publishing, polling), the rest of the machine (Redis, PostgreSQL); busy = the")
    print("machine's busy share of its cores over the timed run")
    print(_cpu_table(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
