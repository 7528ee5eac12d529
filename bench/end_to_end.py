"""Kernel occurrences against plain Celery tasks, through the same real workers on Redis.

For each kernel back end one ``celery -A celery_app worker -c 2 -P prefork`` serves
both sides of the comparison, alternating:

* **kernel**: ``--n`` queued occurrences of a ``callable`` job are created up front
  (``Kernel.fire`` in batches), then ``--n`` ``kernel.run_occurrence`` hints are
  published; the clock runs from the first publish until ``Kernel.status()`` counts
  them all succeeded.
* **plain**: ``--n`` ``bench.noop`` tasks on the same broker and pool, timed until
  their Redis counter reaches ``--n`` (no result backend).

Both bodies are the same single Redis ``INCR`` (``bench/noop.py``), so
``kernel/plain`` is the share of plain Celery's throughput the kernel keeps. Each side
is warmed up first; the table shows the median of ``--repeat`` runs. Beside it,
``pair ms`` is what the kernel adds per run, measured with the worker idle: one
``Kernel.claim`` + ``Kernel.succeed`` in this process, no Celery.

Run from the repository root::

    .venv/bin/python bench/end_to_end.py                        # 5000 per run, 3 runs
    .venv/bin/python bench/end_to_end.py --n 1000 --repeat 1 --backends sqlite

Redis and PostgreSQL are started from ``tests/servers.py`` (as an unprivileged user
when run as root), on 127.0.0.1 and ephemeral ports, and stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
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

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.support import fresh_database, server  # noqa: E402
from kernel import Kernel  # noqa: E402

__all__ = ["main"]

BACKENDS = ("sqlite", "postgres")
SIDES = ("plain", "kernel")
JOB_ID = "bench-noop"
PAIR_OWNER = "bench-inline"
PAIRS = 1000
KERNEL_TASK = "kernel.run_occurrence"
PLAIN_TASK = "bench.noop"  # bench/noop.py; not imported here, it registers on the product's app
FIRE_BATCH = 1000
WARMUP = 300
# Completion is polled; the same interval on both sides keeps the bias equal and small.
POLL_S = 0.02
SETTINGS_MODULE = "bench_end_to_end_settings"
WORKER_ARGS = ("-A", "celery_app", "worker", "-P", "prefork")
_STOP_GRACE_S = 20.0
_LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class Sample:
    backend: str
    side: str
    n: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.n / self.seconds


class Worker:
    """``celery -A celery_app worker -c 2 -P prefork`` in a session of its own, stopped by PID."""

    def __init__(self, workdir: Path, env: dict[str, str], concurrency: int) -> None:
        self.log_path = workdir / "worker.log"
        name = f"bench-{uuid.uuid4().hex[:8]}@%h"
        argv = [sys.executable, "-m", "celery", *WORKER_ARGS, "-c", str(concurrency), "-n", name]
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise RuntimeError(f"the worker exited with {self.popen.returncode}:\n{self.tail()}")

    def tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    def stop(self) -> None:
        """SIGTERM (warm shutdown), then SIGKILL whatever is left of the session we created."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)


class Occurrences:
    """Creates queued occurrences of one no-op ``callable`` job, batch by batch, up front."""

    def __init__(self, kernel: Kernel, counter_key: str) -> None:
        self.kernel = kernel
        self.cursor: str | None = None
        self.made = 0
        kernel.define_job(
            {
                "id": JOB_ID,
                "kind": "callable",
                "schedule": None,
                "overlap": "allow",
                "max_attempts": 1,
                "payload": {"callable": "bench.noop:bump", "kwargs": {"key": counter_key}},
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


def _publish(app: Any, task: str, args: Sequence[list[Any]], shadow: str | None = None) -> float:
    """Send one message per ``args`` item on one producer; returns when the first went out."""
    started = 0.0
    with app.producer_or_acquire() as producer:
        for i, item in enumerate(args):
            if i == 0:
                started = time.monotonic()
            app.send_task(task, args=item, shadow=shadow, producer=producer)
    return started


def _wait(
    done: Callable[[], bool],
    worker: Worker,
    timeout: float,
    what: str,
    detail: Callable[[], str] = str,
) -> float:
    """Poll ``done`` every POLL_S; the time it first held."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"timed out after {timeout:.0f}s waiting for {what}; {detail()}\n"
                f"worker log:\n{worker.tail()}"
            )
        worker.check_alive()
        time.sleep(POLL_S)
    return time.monotonic()


class Bench:
    """One back end's worker, kernel and broker clients; runs either side on demand."""

    def __init__(
        self, backend: str, kernel: Kernel, publisher: Any, broker: redis.Redis, worker: Worker
    ) -> None:
        self.backend = backend
        self.kernel = kernel
        self.publisher = publisher
        self.broker = broker
        self.worker = worker
        self.counter = f"bench:kernel:{uuid.uuid4().hex}"
        self.occurrences = Occurrences(kernel, self.counter)
        self.kernel_runs = 0

    def plain(self, n: int) -> Sample:
        key = f"bench:plain:{uuid.uuid4().hex}"
        started = _publish(self.publisher, PLAIN_TASK, [[key]] * n)
        ended = _wait(
            lambda: int(self.broker.get(key) or 0) >= n,
            self.worker,
            _timeout(n),
            f"{n} plain tasks",
        )
        return Sample(self.backend, "plain", n, ended - started)

    def kernel_side(self, n: int) -> Sample:
        before = self._counts()["succeeded"]
        ids = self.occurrences.create(n)
        self.kernel_runs += n
        # As Beat's pump publishes hints: the job's name as the shadow.
        started = _publish(self.publisher, KERNEL_TASK, [[occ_id] for occ_id in ids], shadow=JOB_ID)
        # Kernel.status() scans the table: polling it all along would steal a core from
        # the workers. The body's counter is cheap and only runs ahead of the settles by
        # the runs in flight, so it says when to start asking the kernel.
        _wait(
            lambda: self._ran() >= self.kernel_runs,
            self.worker,
            _timeout(n),
            f"{n} occurrences to run",
            detail=lambda: f"kernel status: {self._counts()}",
        )
        ended = _wait(
            lambda: self._counts()["succeeded"] - before >= n,
            self.worker,
            _timeout(0),
            f"{n} occurrences to succeed",
            detail=lambda: f"kernel status: {self._counts()}",
        )
        if self._ran() != self.kernel_runs:  # every occurrence's body ran exactly once
            raise RuntimeError(
                f"{self.kernel_runs} occurrences succeeded but the body ran {self._ran()} times"
            )
        return Sample(self.backend, "kernel", n, ended - started)

    def pairs(self, n: int) -> Sample:
        """Claim and settle ``n`` occurrences in this process: the kernel's own cost per run."""
        ids = self.occurrences.create(n)
        started = time.monotonic()
        for occ_id in ids:
            claim = self.kernel.claim(occ_id, owner=PAIR_OWNER)
            if claim is None:
                raise RuntimeError(f"occurrence {occ_id} was not claimable")
            self.kernel.succeed(occ_id, owner=PAIR_OWNER, fence=claim.fence)
        return Sample(self.backend, "pair", n, time.monotonic() - started)

    def run(self, side: str, n: int) -> Sample:
        return self.plain(n) if side == "plain" else self.kernel_side(n)

    def _ran(self) -> int:
        return int(self.broker.get(self.counter) or 0)

    def _counts(self) -> dict[str, int]:
        counts: dict[str, int] = self.kernel.status()["counts"]
        return counts


def _timeout(n: int) -> float:
    return 60.0 + n / 20  # 20/s is far below either side's worst rate


def _worker_env(workdir: Path, broker_url: str, database_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_", "KERNEL_")) and k != "PYTHONPATH"
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(workdir)]),
        CELERY_BROKER_URL=broker_url,
        CELERY_CONFIG_MODULE=SETTINGS_MODULE,
        KERNEL_DATABASE_URL=database_url,
        KERNEL_SQLITE_SYNCHRONOUS="FULL",
        KERNEL_VAR_DIR=str(workdir / "var"),
    )
    (workdir / f"{SETTINGS_MODULE}.py").write_text('imports = ["bench.noop"]\n')
    return env


def _measure(
    backend: str,
    database_url: str,
    broker_url: str,
    publisher: Any,
    args: argparse.Namespace,
    report: Callable[[Sample], None],
) -> None:
    kernel = Kernel.open(database_url, migrate_schema=True, sqlite_synchronous="FULL")
    with ExitStack() as stack:
        stack.callback(kernel.close)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kernel-e2e-")))
        worker = Worker(workdir, _worker_env(workdir, broker_url, database_url), args.concurrency)
        stack.callback(worker.stop)
        broker = stack.enter_context(redis.Redis.from_url(broker_url))
        bench = Bench(backend, kernel, publisher, broker, worker)
        for side in SIDES:  # the first messages also wait for the worker to come up
            bench.run(side, WARMUP)
        for r in range(args.repeat):
            # Alternate which side goes first, so a drift in the machine hits both.
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                report(bench.run(side, args.n))
            report(bench.pairs(min(PAIRS, args.n)))


def _database(backend: str, stack: ExitStack) -> str:
    """A fresh kernel database (SQLite, or PostgreSQL we start); gone when ``stack`` closes."""
    server_url = stack.enter_context(server("postgres")) if backend == "postgres" else None
    return stack.enter_context(fresh_database(server_url, "kernel-e2e-db-"))


def _publisher(broker_url: str) -> Any:
    """An app with the product's settings (serializers, events) publishing to ``broker_url``."""
    from celery_app.factory import create_app

    return create_app("bench-publisher", broker_url=broker_url)


def _table(samples: list[Sample]) -> str:
    """Median rate per (backend, side), and kernel/plain of the medians."""
    rates: dict[tuple[str, str], list[float]] = {}
    for s in samples:
        rates.setdefault((s.backend, s.side), []).append(s.rate)
    rows = [
        f"{'backend':<10} {'occurrences/s':>14} {'tasks/s':>10} {'kernel/plain':>13} {'pair ms':>8}"
    ]
    for backend in dict.fromkeys(s.backend for s in samples):
        occ, plain, pair = (
            statistics.median(rates.get((backend, side)) or [0.0])
            for side in ("kernel", "plain", "pair")
        )
        ratio = f"{occ / plain:.2f}" if occ and plain else "-"
        pair_ms = f"{1000 / pair:.2f}" if pair else "-"
        rows.append(f"{backend:<10} {occ:>14.0f} {plain:>10.0f} {ratio:>13} {pair_ms:>8}")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=5000, help="messages per timed run (default 5000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed runs per side; the table shows medians"
    )
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated kernel back ends (default sqlite,postgres)",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    # Stopped with SIGTERM, still stop the servers and the worker we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or set(backends) - set(BACKENDS):
        parser.error(f"--backends: choose from {', '.join(BACKENDS)}")
    samples: list[Sample] = []

    def report(sample: Sample) -> None:
        samples.append(sample)
        print(
            f"{sample.backend:<10} {sample.side:<7} {sample.rate:8.0f}/s "
            f"({sample.n} in {sample.seconds:.2f}s)",
            flush=True,
        )

    with ExitStack() as stack:
        broker_url = stack.enter_context(server("redis"))
        publisher = _publisher(broker_url)
        for backend in backends:
            with ExitStack() as per_backend:
                database_url = _database(backend, per_backend)
                _measure(backend, database_url, broker_url, publisher, args, report)
    print()
    print(
        f"{args.n} no-op runs per timed run, {args.concurrency} prefork processes, Redis broker; "
        f"median of {args.repeat}"
    )
    print(_table(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
