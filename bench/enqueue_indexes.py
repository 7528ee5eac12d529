"""What the indexes, the commit's flush and the row's width cost an enqueue: the same
enqueues into a kernel with every index, into one without the secondary indexes a queued
row enters, into one whose commits do not wait for their flush, and into one whose rows
carry only their run's own part of the definition (issue 42 items 2 and 3).

Four fresh databases per back end, all migrated: ``all`` as the kernel makes it, ``bare``
with the non-unique secondary indexes of ``occurrences`` and ``events`` dropped (the
primary keys and the unique indexes an enqueue's ``ON CONFLICT`` needs are kept),
``unflushed``, every index but the commit not waiting for its flush (PostgreSQL's
``synchronous_commit`` off for that database; SQLite WAL ``synchronous=NORMAL``, synced
at checkpoints), and ``narrow``, every index and flush but each row's ``definition`` its
run's own text alone, without the task's part every run of it repeats (what a definition
stored once per task would leave in the row). Rounds alternate between them (one
``Kernel.enqueue`` each ``--single`` times, then ``Kernel.enqueue_many`` of ``--batch``);
each row is the lowest and the median over the rounds of the wall time (the server's
work and the commit's flush included) and this process's CPU, per call. Neither ``bare``
nor ``unflushed`` nor ``narrow`` is a kernel to use (the first's reads scan, the second
loses acknowledged enqueues in a crash, the third's rows cannot be run): they measure
what a queued row's index entries, the commit's wait and the row's width cost, nothing
else.

Run from the repository root::

    .venv/bin/python bench/enqueue_indexes.py
    .venv/bin/python bench/enqueue_indexes.py --rounds 9 --backends postgres
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

import kernel.statements  # noqa: E402
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
    "occurrences_running",
    "occurrences_settled_by_status",
    "events_job",
    "events_job_definitions",
    "events_occurrence",
    "events_xact",
)


def _kernel(url: str, variant: str) -> Kernel:
    sqlite = url.startswith("sqlite")
    if variant == "unflushed" and not sqlite:  # the database's setting: every session's
        first = Kernel.open(url, migrate_schema=True)
        with first.engine.connect() as conn:
            name = conn.execute(sa.text("SELECT current_database()")).scalar_one()
            conn.execute(sa.text(f'ALTER DATABASE "{name}" SET synchronous_commit TO off'))
            conn.commit()
        first.close()
    synchronous = "NORMAL" if variant == "unflushed" and sqlite else "FULL"
    opened = Kernel.open(url, migrate_schema=True, sqlite_synchronous=synchronous)
    if variant == "bare":
        with opened.engine.begin() as conn:
            for name in DROPPED:
                conn.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
    opened.enqueue(task="bench.enqueued", args=["warm"])  # defines the task's job
    return opened


#: The kernel's own, which ``narrow`` swaps out while it runs.
_ENQUEUE_PARAMS = kernel.statements.enqueue_params


def _own_parts_only(dialect: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``narrow``'s parameters: each row's definition its own part, head and tail dropped."""
    narrowed = []
    for row in rows:
        own = (row.get("definition_parts") or ("", row["definition"], ""))[1]
        narrowed.append({**row, "definition": own, "definition_parts": None})
    return _ENQUEUE_PARAMS(dialect, narrowed)


@contextmanager
def _rows_as(variant: str) -> Iterator[None]:
    """``narrow``'s enqueues send their rows' own parts; the others' are the kernel's own."""
    if variant != "narrow":
        yield
        return
    kernel.statements.enqueue_params = _own_parts_only
    try:
        yield
    finally:
        kernel.statements.enqueue_params = _ENQUEUE_PARAMS


def _timed(run: Callable[[], object], calls: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per call of ``run``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        run()
    return (
        (time.perf_counter() - wall) * 1e6 / calls,
        (time.process_time() - cpu) * 1e6 / calls,
    )


def _measure(urls: dict[str, str], args: argparse.Namespace) -> dict[str, list[float]]:
    kernels = {variant: _kernel(url, variant) for variant, url in urls.items()}
    batch = [EnqueueRequest("bench.enqueued", [i], {}) for i in range(args.batch)]
    found: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            for name, opened in kernels.items():
                with _rows_as(name):
                    one = _timed(
                        functools.partial(opened.enqueue, task="bench.enqueued", args=[1]),
                        args.single,
                    )
                    many = _timed(functools.partial(opened.enqueue_many, batch), 2)
                for what, (wall, cpu) in (("enqueue", one), (f"enqueue_many/{args.batch}", many)):
                    found.setdefault(f"{what} {name} wall", []).append(wall)
                    found.setdefault(f"{what} {name} cpu", []).append(cpu)
    finally:
        for opened in kernels.values():
            opened.close()
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
            with ExitStack() as databases:
                urls = {
                    variant: databases.enter_context(fresh_database(server_url, "enqueue-ix-"))
                    for variant in ("all", "bare", "unflushed", "narrow")
                }
                found = _measure(urls, args)
            print(f"== {backend}: µs per call, lowest / median of {args.rounds} rounds")
            for key, values in found.items():
                print(f"{key:<34} {min(values):>10.0f} / {statistics.median(values):>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
