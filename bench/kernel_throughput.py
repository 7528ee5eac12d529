"""Claim + settle pairs per second: the kernel against the same transactions on the raw driver.

For each back end (SQLite in WAL mode with ``synchronous=NORMAL`` or ``FULL``, and
PostgreSQL) and each process count (1, 2, 4) a fresh database gets ``2 * n`` queued
occurrences up front (``Kernel.fire`` in batches). Each process claims a disjoint
slice of ids (targeted claims, the Celery path) and settles every claim as
succeeded: half through ``Kernel.claim``/``Kernel.succeed``, half through the raw
baseline, which sends the statements the kernel sends per call, hand-written for
sqlite3 and psycopg on the same schema. The two modes take turns in rounds, every
process in step, so ``kernel/raw`` is the share of the driver's speed the kernel
keeps — its Python overhead per call, not the database's cost — even while other
work on the machine comes and goes.

Run from the repository root::

    .venv/bin/python bench/kernel_throughput.py            # 3000 pairs per mode and row
    .venv/bin/python bench/kernel_throughput.py --quick    # 600
    .venv/bin/python bench/kernel_throughput.py --backends sqlite-normal --procs 1

Without ``--postgres-url`` a durable PostgreSQL server (``fsync`` and
``synchronous_commit`` on) is started for the run (``bench/support.py``); each row's
database is created on it and dropped.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sqlite3
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.raw_baseline import RawWorker  # noqa: E402
from bench.support import fresh_database, postgres_durability, server, servers  # noqa: E402
from kernel import Kernel  # noqa: E402

__all__ = ["main"]

JOB_ID = "bench"
OWNER_PREFIX = "bench-worker"
LEASE_S = 300.0
FIRE_BATCH = 500
# Several writer processes queue for SQLite's one write lock; under synchronous=FULL
# the kernel's default 5 s busy timeout can starve one of four. Same for both modes.
BUSY_TIMEOUT_MS = 60_000
BACKENDS = ("sqlite-normal", "sqlite-full", "postgres")
MODES = ("kernel", "raw")


def _worker(
    url: str,
    synchronous: str,
    slices: dict[str, list[int]],
    rounds: int,
    index: int,
    barrier: Any,
    results: Any,
) -> None:
    """Claim and settle this process's ids in rounds, kernel and raw taking turns.

    Every process starts each chunk at the same barrier, so one mode never overlaps
    the other and a load that comes and goes moves both. The first pair of each mode
    runs before the first barrier: connections, caches and prepared statements are
    warm, as in a worker that has run a task before. Reports (mode, start, end) for
    every chunk on the shared monotonic clock.
    """
    owner = f"{OWNER_PREFIX}-{index}"
    kernel = Kernel.open(url, sqlite_synchronous=synchronous, busy_timeout_ms=BUSY_TIMEOUT_MS)
    raw = RawWorker(url, synchronous, BUSY_TIMEOUT_MS)
    lease_ms = int(LEASE_S * 1000)

    def kernel_pair(occ_id: int) -> None:
        claim = kernel.claim(occ_id, owner=owner, lease=LEASE_S)
        if claim is None:
            raise AssertionError(f"occurrence {occ_id} was not claimed")
        kernel.succeed(occ_id, owner=owner, fence=claim.fence, result=None)

    def raw_pair(occ_id: int) -> None:
        raw.succeed(occ_id, owner, raw.claim(occ_id, owner, lease_ms))

    pair = {"kernel": kernel_pair, "raw": raw_pair}
    timings: list[tuple[str, float, float]] = []
    try:
        for mode in MODES:
            pair[mode](slices[mode][0])
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                chunk = _chunk(slices[mode][1:], r, rounds)
                barrier.wait()
                start = time.monotonic()
                for occ_id in chunk:
                    pair[mode](occ_id)
                timings.append((mode, start, time.monotonic()))
        results.put((index, timings, None))
    except BaseException as exc:  # the parent reports it; a hung barrier would hide it
        barrier.abort()
        results.put((index, timings, f"{type(exc).__name__}: {exc}"))
    finally:
        kernel.close()
        raw.close()


def _chunk(ids: Sequence[int], r: int, rounds: int) -> Sequence[int]:
    size = -(-len(ids) // rounds)
    return ids[r * size : (r + 1) * size]


def _prepare(url: str, n: int, synchronous: str) -> list[int]:
    """Migrate ``url`` and create ``n`` queued occurrences of one job; return their ids."""
    kernel = Kernel.open(
        url, migrate_schema=True, sqlite_synchronous=synchronous, busy_timeout_ms=BUSY_TIMEOUT_MS
    )
    try:
        kernel.define_job(
            {
                "id": JOB_ID,
                "kind": "task",
                "payload": {"task": "bench.noop"},
                "overlap": "allow",
                "max_queued": 10000,  # admission bounds the backlog under every policy
                "max_attempts": 1,
            }
        )
        at = kernel.now() - timedelta(seconds=1)
        ids: list[int] = []
        cursor: str | None = None
        for start in range(0, n, FIRE_BATCH):
            keys = [f"t{i}" for i in range(start, min(n, start + FIRE_BATCH))]
            report = kernel.fire(
                JOB_ID,
                expected_revision=1,
                expected_cursor=cursor,
                firings=[(key, at) for key in keys],
                next_cursor=(f"after-{keys[-1]}", at),
            )
            ids.extend(report.created)
            cursor = f"after-{keys[-1]}"
        if len(ids) != n:
            raise RuntimeError(f"created {len(ids)} occurrences, wanted {n}")
        return ids
    finally:
        kernel.close()


def _verify(url: str, n: int) -> None:
    """Every occurrence succeeded, with one claim and one success event each."""
    counts = (
        _scalar(url, "SELECT count(*) FROM occurrences WHERE status = 'succeeded'"),
        _scalar(url, "SELECT count(*) FROM events WHERE type = 'occurrence_claimed'"),
        _scalar(url, "SELECT count(*) FROM events WHERE type = 'occurrence_succeeded'"),
    )
    if counts != (n, n, n):
        raise RuntimeError(f"wanted {n} succeeded, claim and success events; found {counts}")


def _scalar(url: str, query: str) -> int:
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(servers().libpq_url(url)) as pg:
            row = pg.execute(query).fetchone()
    else:
        lite = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            row = lite.execute(query).fetchone()
        finally:
            lite.close()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class Cell:
    """One back end and process count: pairs and busy seconds per mode."""

    backend: str
    procs: int
    pairs: dict[str, int]
    seconds: dict[str, float]

    def rate(self, mode: str) -> float:
        return self.pairs[mode] / self.seconds[mode]

    @property
    def ratio(self) -> float:
        return self.rate("kernel") / self.rate("raw")


def _run(backend: str, url: str, n: int, procs: int, rounds: int) -> Cell:
    """Create ``n`` occurrences per mode, run the workers, check the outcome."""
    synchronous = "FULL" if backend == "sqlite-full" else "NORMAL"
    ids = _prepare(url, 2 * n, synchronous)
    by_mode = {"kernel": ids[:n], "raw": ids[n:]}
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_worker,
            args=(
                url,
                synchronous,
                {mode: by_mode[mode][i::procs] for mode in MODES},
                rounds,
                i,
                barrier,
                results,
            ),
        )
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    reports = [results.get() for _ in workers]
    for w in workers:
        w.join()
    errors = [err for *_, err in reports if err]
    if errors:
        raise RuntimeError(f"{backend} x{procs}: {errors[0]}")
    seconds = dict.fromkeys(MODES, 0.0)
    for chunk in zip(*(timings for _, timings, _ in reports), strict=True):
        # The same chunk in every process: from the first start to the last end.
        seconds[chunk[0][0]] += max(end for *_, end in chunk) - min(start for _, start, _ in chunk)
    _verify(url, 2 * n)
    return Cell(backend, procs, dict.fromkeys(MODES, n - procs), seconds)


def _table(cells: list[Cell]) -> str:
    rows = [f"{'backend':<14} {'procs':>5} {'kernel/s':>10} {'raw/s':>10} {'kernel/raw':>10}"]
    for c in cells:
        rows.append(
            f"{c.backend:<14} {c.procs:>5} {c.rate('kernel'):>10.0f} {c.rate('raw'):>10.0f} "
            f"{c.ratio:>10.2f}"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, help="claim+settle pairs per mode and cell (3000)")
    parser.add_argument("--quick", action="store_true", help="600 pairs unless --n")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=6, help="chunks per mode, taking turns")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    n = args.n or (600 if args.quick else 3000)
    cells: list[Cell] = []
    with ExitStack() as stack:
        pg_url = (
            stack.enter_context(server("postgres", args.postgres_url, durable=True))
            if "postgres" in args.backends
            else None
        )
        if pg_url is not None:
            print(f"PostgreSQL: {postgres_durability(pg_url)}", flush=True)
        for backend in args.backends:
            for procs in args.procs:
                print(f"{backend:<14} procs={procs}  {2 * n} occurrences ...", flush=True)
                server_url = pg_url if backend == "postgres" else None
                with fresh_database(server_url, "kernel-bench-") as url:
                    cell = _run(backend, url, n, procs, args.rounds)
                cells.append(cell)
                print(
                    f"{backend:<14} procs={procs}  kernel {cell.rate('kernel'):6.0f}/s  "
                    f"raw {cell.rate('raw'):6.0f}/s  kernel/raw {cell.ratio:.2f}",
                    flush=True,
                )
    print()
    print(f"claim+settle pairs/s, {n} pairs per mode and row in {args.rounds} rounds each")
    print(_table(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
