"""What the indexes cost an enqueue: the same enqueues into a kernel with every index and
into one without the secondary indexes a queued row enters (issue 42 item 2).

Two fresh databases per back end, both migrated: ``all`` as the kernel makes it, ``bare``
with the non-unique secondary indexes of ``occurrences`` and ``events`` dropped (the
primary keys and the unique indexes an enqueue's ``ON CONFLICT`` needs are kept). Rounds
alternate between them (one ``Kernel.enqueue`` each ``--single`` times, then
``Kernel.enqueue_many`` of ``--batch``); each row is the lowest and the median over the
rounds of the wall time (the server's work and the commit's flush included) and this
process's CPU, per call. The ``bare`` kernel is not a usable one (its reads scan): it is a
measure of what a queued row's index entries cost, nothing else.

Run from the repository root::

    .venv/bin/python bench/enqueue_indexes.py
    .venv/bin/python bench/enqueue_indexes.py --rounds 9 --backends postgres
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from bench.support import fresh_database, server  # noqa: E402
from kernel import EnqueueRequest, Kernel  # noqa: E402

__all__ = ["main"]

#: The secondary indexes dropped in ``bare``: every non-unique one of the two tables an
#: enqueue writes (a queued row enters the non-partial ones and ``occurrences_claimable``).
DROPPED = (
    "occurrences_adjudication",
    "occurrences_awaiting_approval",
    "occurrences_claimable",
    "occurrences_expiring",
    "occurrences_job",
    "occurrences_job_newest",
    "occurrences_pool",
    "occurrences_prunable",
    "occurrences_running",
    "occurrences_settled_status",
    "events_job",
    "events_job_definitions",
    "events_occurrence",
    "events_xact",
)


def _kernel(url: str, bare: bool) -> Kernel:
    kernel = Kernel.open(url, migrate_schema=True)
    if bare:
        with kernel.engine.begin() as conn:
            for name in DROPPED:
                conn.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
    kernel.enqueue(task="bench.enqueued", args=["warm"])  # defines the task's job
    return kernel


def _timed(run: Callable[[], object], calls: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per call of ``run``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        run()
    return (
        (time.perf_counter() - wall) * 1e6 / calls,
        (time.process_time() - cpu) * 1e6 / calls,
    )


def _measure(url_all: str, url_bare: str, args: argparse.Namespace) -> dict[str, list[float]]:
    kernels = {"all": _kernel(url_all, False), "bare": _kernel(url_bare, True)}
    batch = [EnqueueRequest("bench.enqueued", [i], {}) for i in range(args.batch)]
    found: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            for name, kernel in kernels.items():
                one = _timed(lambda k=kernel: k.enqueue(task="bench.enqueued", args=[1]),
                             args.single)  # fmt: skip
                many = _timed(lambda k=kernel: k.enqueue_many(batch), 2)
                for what, (wall, cpu) in (("enqueue", one), (f"enqueue_many/{args.batch}", many)):
                    found.setdefault(f"{what} {name} wall", []).append(wall)
                    found.setdefault(f"{what} {name} cpu", []).append(cpu)
    finally:
        for kernel in kernels.values():
            kernel.close()
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (5)")
    parser.add_argument("--single", type=int, default=200, help="single enqueues a round")
    parser.add_argument("--batch", type=int, default=500, help="rows per enqueue_many")
    parser.add_argument("--backends", nargs="+", choices=("sqlite", "postgres"),
                        default=["sqlite", "postgres"])  # fmt: skip
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        pg_url = (
            stack.enter_context(server("postgres", args.postgres_url, durable=True))
            if "postgres" in args.backends
            else None
        )
        for backend in args.backends:
            server_url = pg_url if backend == "postgres" else None
            with (
                fresh_database(server_url, "enqueue-indexes-") as url_all,
                fresh_database(server_url, "enqueue-indexes-") as url_bare,
            ):
                found = _measure(url_all, url_bare, args)
            print(f"== {backend}: µs per call, lowest / median of {args.rounds} rounds")
            for key, values in found.items():
                print(f"{key:<34} {min(values):>10.0f} / {statistics.median(values):>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
