"""Plain Celery, celery-kernel and the Python PostgreSQL job queues, one after another.

One Redis and one PostgreSQL (durable: ``fsync`` and ``synchronous_commit`` on, as
users run it) serve every system in turn, each with the same no-op body (one Redis
``INCR``, ``bench/counter.py``) and two worker processes:

* ``celery``: a stock Celery app (Celery's defaults, ``bench/stock_app.py``), and
  ``celery-events``: the same with ``-E`` (task events, as Flower needs). The ratio
  column divides by ``celery``: what a user runs today.
* ``kernel-sqlite`` / ``kernel-postgres``: occurrences through the product's real
  ``celery worker`` (as ``end_to_end.py``), timed until the kernel settled them.
* ``procrastinate`` (2 processes x 1) and ``procrastinate-1x2`` (1 process, concurrency
  2); ``pgqueuer`` (2 processes, its batched dequeue); ``oban`` (2 x 1) and ``oban-1x2``:
  each peer's driver in ``bench/peers/``, at its documented default durability, timed
  from the first enqueue until every body ran and the peer recorded every job done.

Then the two-schedulers check: each system with periodic jobs runs two schedulers
(two ``celery beat``, or two peer processes that each schedule) on an every-second
job (oban: every minute, its resolution) for ``--dup-seconds``, and an external ledger
(a Redis list of slots) says how many slots ran twice or never.

Run from the repository root, after ``pip install -e '.[bench]'``::

    .venv/bin/python bench/peers.py --quick
    .venv/bin/python bench/peers.py --jobs 2000 --repeat 3
    .venv/bin/python bench/peers.py --systems celery,kernel-postgres,procrastinate --no-dup
    .venv/bin/python bench/peers.py --oban-python /path/to/python3.12   # oban needs 3.12+
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import redis
from celery import Celery

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.end_to_end import KernelRuns, kernel_worker  # noqa: E402
from bench.stock_app import STOCK_TASK  # noqa: E402
from bench.support import (  # noqa: E402
    RssSampler,
    fresh_database,
    peer_servers,
    servers,
)
from bench.workers import (  # noqa: E402
    CeleryTasks,
    Worker,
    broker_db,
    timeout_for,
    wait_until,
    worker_env,
)

__all__ = ["main"]

DRIVERS = ROOT / "bench" / "peers"
# (driver, worker processes, concurrency per process)
PEERS: dict[str, tuple[str, int, int]] = {
    "procrastinate": ("procrastinate", 2, 1),
    "procrastinate-1x2": ("procrastinate", 1, 2),
    "pgqueuer": ("pgqueuer", 2, 1),
    "oban": ("oban", 2, 1),
    "oban-1x2": ("oban", 1, 2),
}
SYSTEMS = ("celery", "celery-events", "kernel-sqlite", "kernel-postgres", *PEERS)
# Jobs not yet done, as each peer's own tables say.
PENDING_SQL = {
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
    "pgqueuer": "SELECT count(*) FROM pgqueuer",
    "oban": "SELECT count(*) FROM oban_jobs WHERE state IN ('available', 'scheduled', 'executing')",
}
SCHEDULERS = ("celery", "kernel-sqlite", "kernel-postgres", "procrastinate", "pgqueuer", "oban")
TICK_JOB = "bench-tick"
_DUP_SETTLE_S = 3.0


@dataclass
class Result:
    system: str
    config: str
    rates: list[float] = field(default_factory=list)
    rss_mb: float = 0.0
    note: str = ""

    @property
    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0


@dataclass(frozen=True)
class Context:
    """What every system's run needs: the servers, the options, a scratch directory."""

    args: argparse.Namespace
    broker_url: str
    pg_url: str
    workdir: Path


# -- drivers of peers, as subprocesses ------------------------------------------------


def _driver_argv(ctx: Context, driver: str, *args: str) -> tuple[list[str], bytes | None]:
    """The command running ``driver`` (oban: on ``--oban-python``, the script on stdin)."""
    script = DRIVERS / f"{driver}_driver.py"
    if driver == "oban":
        return [*shlex.split(ctx.args.oban_python), "-", *args], script.read_bytes()
    return [sys.executable, str(script), *args], None


def _driver_env(ctx: Context, **extra: str) -> dict[str, str]:
    return {**os.environ, "BENCH_REDIS_URL": ctx.broker_url, **extra}


def _run_driver(ctx: Context, driver: str, *args: str) -> str:
    argv, stdin = _driver_argv(ctx, driver, *args)
    done = subprocess.run(
        argv, input=stdin, capture_output=True, env=_driver_env(ctx), timeout=300, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{driver} {args[0]} exited {done.returncode}:\n{done.stderr[-3000:]!r}")
    return done.stdout.decode()


class DriverProcess:
    """One long-running driver command (``work``/``schedule``), logged, stopped by PID."""

    def __init__(self, ctx: Context, driver: str, *args: str, **env: str) -> None:
        argv, stdin = _driver_argv(ctx, driver, *args)
        self.log_path = ctx.workdir / f"{driver}-{uuid.uuid4().hex[:8]}.log"
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_driver_env(ctx, **env),
                start_new_session=True,
            )
        if stdin is not None and self.popen.stdin is not None:
            self.popen.stdin.write(stdin)
            self.popen.stdin.close()

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"peer worker exited with {self.popen.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)


def _libpq(url: str) -> str:
    return str(servers().libpq_url(url))


def _pending(dsn: str, driver: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(PENDING_SQL[driver]).fetchone()
    return int(row[0]) if row else 0


class PeerJobs:
    """``n`` no-op jobs through a peer's workers, timed from the first enqueue to all done."""

    def __init__(self, ctx: Context, driver: str, dsn: str, procs: list[DriverProcess]) -> None:
        self.ctx, self.driver, self.dsn, self.procs = ctx, driver, dsn, procs
        self.broker = redis.Redis.from_url(ctx.broker_url)
        self.rss_mb = 0.0

    def _alive(self) -> None:
        for proc in self.procs:
            proc.check_alive()

    def run(self, n: int) -> float:
        key = f"bench:{self.driver}:{uuid.uuid4().hex}"
        with RssSampler([p.popen.pid for p in self.procs]) as rss:
            started = float(_run_driver(self.ctx, self.driver, "enqueue", self.dsn, str(n), key))
            wait_until(
                lambda: int(self.broker.get(key) or 0) >= n,
                self._alive,
                timeout_for(n),
                f"{n} {self.driver} jobs to run",
            )
            ended = wait_until(
                lambda: _pending(self.dsn, self.driver) == 0,
                self._alive,
                timeout_for(0),
                f"{self.driver} to record {n} jobs done",
            )
        self.rss_mb = max(self.rss_mb, rss.peak_mb)
        return ended - started


# -- the systems -----------------------------------------------------------------------


@contextmanager
def _system(ctx: Context, system: str, stack: ExitStack) -> Iterator[Any]:
    """Start ``system``'s workers; yield an object whose ``run(n)`` returns seconds."""
    concurrency = 2
    if system in ("celery", "celery-events"):
        url = broker_db(ctx.broker_url, 1)
        extra = ("-E",) if system == "celery-events" else ()
        worker = Worker(
            ctx.workdir, worker_env(ctx.workdir, url), concurrency, "bench.stock_app", extra
        )
        stack.callback(worker.stop)
        side = CeleryTasks(worker, Celery("bench-peers-publisher", broker=url), url, STOCK_TASK)
        stack.callback(side.close)
        yield side
    elif system.startswith("kernel-"):
        server_url = ctx.pg_url if system == "kernel-postgres" else None
        database_url = stack.enter_context(fresh_database(server_url, "kernel-peers-db-"))
        kernel, worker, publisher = kernel_worker(stack, ctx.broker_url, database_url, concurrency)
        yield KernelRuns(kernel, publisher, ctx.broker_url, worker)
    else:
        driver, nprocs, per_proc = PEERS[system]
        dsn = _libpq(stack.enter_context(fresh_database(ctx.pg_url, "peers-")))
        _run_driver(ctx, driver, "install", dsn)
        procs = [DriverProcess(ctx, driver, "work", dsn, str(per_proc)) for _ in range(nprocs)]
        for proc in procs:
            stack.callback(proc.stop)
        yield PeerJobs(ctx, driver, dsn, procs)


def _config(system: str) -> str:
    if system in PEERS:
        _, nprocs, per_proc = PEERS[system]
        return f"{nprocs} proc x {per_proc}"
    return "2 prefork"


def _unavailable(ctx: Context, system: str) -> str:
    """Why ``system`` cannot run here, or ``""``."""
    if system.startswith("oban") and not ctx.args.oban_python:
        return "skipped: oban needs Python 3.12+ (give --oban-python)"
    return ""


def throughput(ctx: Context, systems: list[str]) -> list[Result]:
    results = []
    args = ctx.args
    for system in systems:
        result = Result(system, _config(system), note=_unavailable(ctx, system))
        results.append(result)
        if result.note:
            print(f"{system:<18} {result.note}", flush=True)
            continue
        with ExitStack() as stack, _system(ctx, system, stack) as side:
            side.run(min(args.warmup, args.jobs))  # also waits for the workers to come up
            for _ in range(args.repeat):
                seconds = side.run(args.jobs)
                result.rates.append(args.jobs / seconds)
                print(
                    f"{system:<18} {args.jobs / seconds:8.0f}/s ({args.jobs} in {seconds:.2f}s)",
                    flush=True,
                )
            result.rss_mb = side.rss_mb
    return results


# -- two schedulers ----------------------------------------------------------------------


@dataclass(frozen=True)
class DupResult:
    system: str
    period: float
    expected: int
    duplicates: int
    misses: int
    basis: str


def _schedulers(ctx: Context, system: str, ledger: str, stack: ExitStack) -> str:
    """Start a worker and two schedulers of an every-second job; return the slot basis."""
    if system == "celery":
        env = worker_env(ctx.workdir, ctx.broker_url, BENCH_LEDGER=ledger)
        worker = Worker(ctx.workdir, env, 2, "bench.stock_app")
        stack.callback(worker.stop)
        for name in ("a", "b"):
            schedule = str(ctx.workdir / f"celerybeat-{name}-{uuid.uuid4().hex[:6]}")
            beat = Worker(ctx.workdir, env, 0, "bench.stock_app", ("-s", schedule), "beat")
            stack.callback(beat.stop)
        return "run start"
    if system.startswith("kernel-"):
        server_url = ctx.pg_url if system == "kernel-postgres" else None
        database_url = stack.enter_context(fresh_database(server_url, "kernel-dup-db-"))
        kernel, worker, _ = kernel_worker(stack, ctx.broker_url, database_url, 2)
        jobs_file = ctx.workdir / f"jobs-{uuid.uuid4().hex[:6]}.json"
        spec = {
            "id": TICK_JOB,
            "kind": "callable",
            "schedule": {"every": "1s"},
            "overlap": "allow",
            "catchup": {"policy": "all", "window": "1h"},
            "payload": {"callable": "bench.counter:record_run", "kwargs": {"ledger": ledger}},
        }
        jobs_file.write_text(json.dumps({"jobs": [spec]}))
        env = worker_env(
            ctx.workdir,
            ctx.broker_url,
            KERNEL_DATABASE_URL=database_url,
            KERNEL_SQLITE_SYNCHRONOUS="FULL",
            KERNEL_JOBS_FILE=str(jobs_file),
            KERNEL_VAR_DIR=str(ctx.workdir / "var"),
        )
        for name in ("a", "b"):
            schedule = str(ctx.workdir / f"kernelbeat-{name}-{uuid.uuid4().hex[:6]}")
            beat = Worker(ctx.workdir, env, 0, "celery_app", ("-s", schedule), "beat")
            stack.callback(beat.stop)
        return "scheduled_for"
    dsn = _libpq(stack.enter_context(fresh_database(ctx.pg_url, "peers-dup-")))
    _run_driver(ctx, system, "install", dsn)
    for _ in range(2):
        proc = DriverProcess(ctx, system, "schedule", dsn, "1", ledger, BENCH_LEDGER=ledger)
        stack.callback(proc.stop)
    return "cron timestamp" if system == "procrastinate" else "run start"


def _count(slots: list[float], period: float, start: float, end: float) -> tuple[int, int, int]:
    """(expected, duplicates, misses) over the slots ``start <= k * period < end``."""
    first, last = int(-(-start // period)), int(-(-end // period))
    counts = dict.fromkeys(range(first, last), 0)
    for t in slots:
        k = round(t / period)
        if k in counts:
            counts[k] += 1
    return len(counts), sum(c - 1 for c in counts.values() if c > 1), list(counts.values()).count(0)


def _ledger_started(broker: redis.Redis, ledger: str) -> bool:
    return int(broker.llen(ledger)) > 0


def duplicates(ctx: Context, systems: list[str]) -> list[DupResult]:
    results = []
    broker = redis.Redis.from_url(ctx.broker_url)
    for system in systems:
        why = _unavailable(ctx, system)
        if system == "oban" and ctx.args.quick:
            why = "skipped in --quick (every minute: over 2 min; try --dup-only --systems oban)"
        if why:
            print(f"{system:<18} two schedulers: {why}", flush=True)
            continue
        period = 60.0 if system == "oban" else 1.0
        seconds = max(ctx.args.dup_seconds, 125.0) if system == "oban" else ctx.args.dup_seconds
        ledger = f"bench:ledger:{system}:{uuid.uuid4().hex}"
        with ExitStack() as stack:
            basis = _schedulers(ctx, system, ledger, stack)
            # Count from the first run on: startup time is not the scheduler's fault.
            first = f"{system}'s first tick"
            started: Callable[[], bool] = partial(_ledger_started, broker, ledger)
            wait_until(started, lambda: None, 90, first)
            start = time.time() + _DUP_SETTLE_S
            time.sleep(seconds + _DUP_SETTLE_S)
            end = time.time()
            time.sleep(_DUP_SETTLE_S)  # runs of the last slots finish
        slots = [float(x) for x in broker.lrange(ledger, 0, -1)]
        expected, dups, misses = _count(slots, period, start, end)
        results.append(DupResult(system, period, expected, dups, misses, basis))
        window = "-".join(time.strftime("%H:%M:%S", time.gmtime(t)) for t in (start, end))
        print(
            f"{system:<18} two schedulers: {expected} slots ({window} UTC), {dups} duplicates, "
            f"{misses} missed",
            flush=True,
        )
    broker.close()
    return results


# -- report ------------------------------------------------------------------------------


def _tables(results: list[Result], dups: list[DupResult]) -> str:
    base = next((r.rate for r in results if r.system == "celery" and r.rate), 0.0)
    rows = [f"{'system':<18} {'workers':<11} {'jobs/s':>8} {'/celery':>8} {'RSS MB':>7}  note"]
    rows = rows if results else []
    for r in results:
        ratio = f"{r.rate / base:.2f}" if base and r.rate else "-"
        rate = f"{r.rate:.0f}" if r.rate else "-"
        rows.append(
            f"{r.system:<18} {r.config:<11} {rate:>8} {ratio:>8} {r.rss_mb:>7.1f}  {r.note}"
        )
    if dups:
        rows += [
            "",
            f"{'two schedulers':<18} {'every':>6} {'slots':>6} {'dups':>5} {'missed':>7}  slot",
        ]
        for d in dups:
            rows.append(
                f"{d.system:<18} {d.period:>5.0f}s {d.expected:>6} {d.duplicates:>5} "
                f"{d.misses:>7}  {d.basis}"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, help="jobs per timed run (2000; --quick 300)")
    parser.add_argument("--repeat", type=int, help="timed runs per system, median (3; --quick 1)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="small sizes: a check, not figures")
    parser.add_argument("--dup-seconds", type=float, help="two-schedulers window (20; --quick 8)")
    parser.add_argument("--no-dup", action="store_true", help="skip the two-schedulers check")
    parser.add_argument("--dup-only", action="store_true", help="only the two-schedulers check")
    parser.add_argument("--oban-python", help="a Python 3.12+ command with oban installed")
    parser.add_argument("--postgres-url", help="use this server instead of starting a durable one")
    args = parser.parse_args(argv)
    args.jobs = args.jobs or (300 if args.quick else 2000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.dup_seconds = args.dup_seconds or (8.0 if args.quick else 20.0)
    args.warmup = 100 if args.quick else 300
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems or set(systems) - set(SYSTEMS):
        parser.error(f"--systems: choose from {', '.join(SYSTEMS)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with peer_servers(args.postgres_url, "bench-peers-") as running:
        broker_url, pg_url, durability, workdir = running
        ctx = Context(args, broker_url, pg_url, workdir)
        print(f"PostgreSQL: {durability}; kernel-sqlite: WAL, synchronous=FULL", flush=True)
        results = [] if args.dup_only else throughput(ctx, systems)
        dup_systems = [s for s in systems if s in SCHEDULERS]
        dups = [] if args.no_dup else duplicates(ctx, dup_systems)
    print()
    print(
        f"{args.jobs} no-op jobs per run, median of {args.repeat}; Redis broker for Celery; "
        f"PostgreSQL {durability}; each peer at its default durability"
    )
    print(_tables(results, dups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
