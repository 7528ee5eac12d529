"""Beat tick time against the number of jobs: the cost must follow due firings, not jobs.

Each back end gets three fresh databases holding 1k, 10k and 100k enabled jobs, of
which 100 fire every minute and are due at each tick; the others fire hourly and
their cursors stand an hour ahead. The jobs are inserted in one transaction straight
into the kernel's ``jobs`` table, each row a valid normalised spec (the template is
validated once; only the id differs) with its digest. A ``KernelScheduler`` built
from a Celery app ticks each database on a :class:`~kernel.testing.ManualClock`, one
simulated minute apart: heartbeat, lease expiry, materialise (due query, plan and
``Kernel.fire`` per due job) and the dispatch query, without publishing to a broker.
Every tick must create exactly the 100 due occurrences. The sizes take turns tick by
tick, so a busy disk or CPU slows them alike. The table shows the median tick, the
due query alone, and each size's tick over the 1k tick (the aim: 100k within 2x).

Run from the repository root::

    .venv/bin/python bench/beat_tick.py                     # SQLite and PostgreSQL
    .venv/bin/python bench/beat_tick.py --backends sqlite --ticks 5

PostgreSQL is started for the run (``bench/support.py``) unless ``--postgres-url``
names a server; the three databases are created on it and dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402

from beat_schedule.timing import trigger_key  # noqa: E402
from bench.support import fresh_database, server  # noqa: E402
from celery_app.beat import KernelScheduler  # noqa: E402
from kernel import Kernel  # noqa: E402
from kernel.db.schema import jobs  # noqa: E402
from kernel.records import dumps, from_dt  # noqa: E402
from kernel.spec.jobspec import validate_job_spec  # noqa: E402
from kernel.testing import ManualClock  # noqa: E402

__all__ = ["main"]

SIZES = (1_000, 10_000, 100_000)
DUE = 100
INSERT_BATCH = 5_000
#: A whole hour, so the hourly jobs' cursors are firings of their own schedule.
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
TEMPLATE = {"kind": "task", "payload": {"task": "bench.noop"}, "overlap": "allow"}


@dataclasses.dataclass(frozen=True)
class Result:
    backend: str
    jobs: int
    tick_s: float
    due_query_s: float


def _fill(kernel: Kernel, n: int) -> None:
    """``n`` enabled jobs, the first ``DUE`` due at T0, in one transaction."""
    minutely = validate_job_spec({"id": "due-template", "schedule": {"every": 60}, **TEMPLATE})
    hourly = validate_job_spec({"id": "idle-template", "schedule": {"every": 3600}, **TEMPLATE})
    stamp = from_dt(T0 - timedelta(minutes=1))
    rows = []
    for i in range(n):
        due = i < DUE
        spec = (minutely if due else hourly).model_copy(
            update={"id": f"{'due' if due else 'idle'}-{i}"}
        )
        cursor = T0 if due else T0 + timedelta(hours=1)
        rows.append({
            "id": spec.id, "revision": 1, "digest": spec.digest, "spec": dumps(spec.to_dict()),
            "enabled": True, "planned": True, "next_fire_at": from_dt(cursor),
            "next_trigger_key": trigger_key("every", cursor), "after_job": None,
            "defined_at": stamp, "updated_at": stamp,
        })  # fmt: skip
    with kernel.engine.begin() as conn:
        for start in range(0, n, INSERT_BATCH):
            conn.execute(jobs.insert(), rows[start : start + INSERT_BATCH])


class Subject:
    """One database of ``n`` jobs, its kernel on a manual clock, and a scheduler on it."""

    def __init__(self, backend: str, url: str, n: int) -> None:
        self.backend, self.n = backend, n
        self.clock = ManualClock(T0 + timedelta(seconds=1))
        self.kernel = Kernel.open(url, migrate_schema=True, clock=self.clock)
        _fill(self.kernel, n)
        app = Celery("beat-tick-bench", set_as_current=False)
        app.conf.update(kernel_database_url=url, kernel_dispatch_batch=10_000)
        # lazy: no setup_schedule, so no beat_schedule sync and no second kernel.
        self.scheduler = KernelScheduler(app=app, lazy=True)
        self.scheduler.kernel = self.kernel
        self.ticks = 0
        self.tick_times: list[float] = []
        self.query_times: list[float] = []

    def tick(self) -> float:
        """A whole tick but the publish (the pump's dispatch query runs, nothing is sent)."""
        kernel, scheduler = self.kernel, self.scheduler
        started = time.perf_counter()
        scheduler._heartbeat(kernel)
        scheduler._expire(kernel)
        scheduler._materialise(kernel)
        kernel.dispatch_batch(limit=scheduler.settings.dispatch_batch)
        elapsed = time.perf_counter() - started
        self.ticks += 1
        queued = kernel.status()["counts"]["queued"]
        if queued != DUE * self.ticks:
            raise RuntimeError(
                f"{self.backend} {self.n}: {queued} occurrences after {self.ticks} ticks"
            )
        self.clock.advance(60)
        return elapsed

    def measure(self) -> None:
        """Time the due query alone, then a whole tick."""
        started = time.perf_counter()
        due = self.kernel.due_jobs()
        self.query_times.append(time.perf_counter() - started)
        if len(due) != DUE:
            raise RuntimeError(f"{self.backend} {self.n}: {len(due)} jobs due, expected {DUE}")
        self.tick_times.append(self.tick())

    def result(self) -> Result:
        return Result(
            self.backend,
            self.n,
            statistics.median(self.tick_times),
            statistics.median(self.query_times),
        )


def _run(backend: str, urls: list[str], ticks: int) -> list[Result]:
    """Tick every size in turn, ``ticks`` rounds, so drift in the machine hits all alike."""
    subjects = [Subject(backend, url, n) for url, n in zip(urls, SIZES, strict=True)]
    try:
        for subject in subjects:
            subject.tick()  # warm-up: connections, compiled statements, caches
        for _ in range(ticks):
            for subject in subjects:
                subject.measure()
        return [subject.result() for subject in subjects]
    finally:
        for subject in subjects:
            subject.kernel.close()


def _ratios(results: list[Result]) -> dict[tuple[str, int], float]:
    """Each run's tick over the smallest size's tick on the same back end."""
    base = {r.backend: r.tick_s for r in results if r.jobs == min(SIZES)}
    return {(r.backend, r.jobs): r.tick_s / base[r.backend] for r in results}


def _table(results: list[Result]) -> str:
    ratios = _ratios(results)
    rows = [
        f"{'backend':<9} {'jobs':>8} {'tick ms':>9} {'due query ms':>13} {'tick / 1k tick':>15}"
    ]
    for r in results:
        rows.append(
            f"{r.backend:<9} {r.jobs:>8} {r.tick_s * 1000:>9.1f} "
            f"{r.due_query_s * 1000:>13.2f} {ratios[(r.backend, r.jobs)]:>15.2f}"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--backends", nargs="+", choices=("sqlite", "postgres"), default=["sqlite", "postgres"]
    )
    parser.add_argument("--ticks", type=int, default=7, help="timed ticks per size (median)")
    parser.add_argument("--postgres-url", help="an existing server (SQLAlchemy URL)")
    args = parser.parse_args(argv)
    results: list[Result] = []
    for backend in args.backends:
        with ExitStack() as stack:
            server_url = (
                stack.enter_context(server("postgres", args.postgres_url))
                if backend == "postgres"
                else None
            )
            # One fresh empty database per size, removed with the stack.
            urls = [stack.enter_context(fresh_database(server_url, "beat-tick-")) for _ in SIZES]
            results.extend(_run(backend, urls, args.ticks))
    print(f"Beat tick with {DUE} due jobs, median of {args.ticks} ticks")
    print(_table(results))
    for backend in args.backends:
        ratio = _ratios(results)[(backend, max(SIZES))]
        print(f"{backend}: {max(SIZES) // 1000}k-job tick / 1k-job tick = {ratio:.2f} (aim: <= 2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
