"""What each index of ``occurrences`` and ``events`` costs a claim + success on SQLite.

One process, no Celery: per variant a fresh kernel file with queued occurrences of one
``callable`` job (as ``end_to_end.py`` makes them), the variant's index dropped by a side
connection (``all`` keeps every index, ``none`` drops every one of both tables), a few
untimed pairs, then ``Kernel.claim`` + ``Kernel.succeed`` pairs:

* **frames**: WAL frames a pair, from the WAL's size over ``--frames-pairs`` pairs after a
  ``wal_checkpoint(TRUNCATE)`` (kept under the 1,000-page auto-checkpoint, which would rewind
  the WAL and make the size lie);
* **CPU**: ``time.process_time`` a pair over ``--pairs`` pairs, at ``--synchronous``.

    .venv/bin/python bench/sqlite_index_cost.py                      # every index, NORMAL
    .venv/bin/python bench/sqlite_index_cost.py --synchronous FULL --variants all,none
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.end_to_end import Occurrences  # noqa: E402
from kernel import Kernel  # noqa: E402

TABLES = ("occurrences", "events")
WARM_PAIRS = 5


def index_names(path: str) -> list[str]:
    """The named indexes of ``occurrences`` and ``events`` (not SQLite's automatic ones)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            " AND tbl_name IN (?, ?) ORDER BY tbl_name, name",
            TABLES,
        ).fetchall()
    return [name for (name,) in rows]


def measure(variant: str, pairs: int, frames_pairs: int, synchronous: str) -> tuple[float, float]:
    """(WAL frames a pair, CPU µs a pair) for ``variant``: ``all``, ``none`` or an index name."""
    with tempfile.TemporaryDirectory(prefix="kernel-index-cost-") as workdir:
        path = f"{workdir}/kernel.db"
        kernel = Kernel.open(
            f"sqlite:///{path}", migrate_schema=True, sqlite_synchronous=synchronous
        )
        try:
            ids = iter(Occurrences(kernel, "index-cost").create(WARM_PAIRS + frames_pairs + pairs))
            dropped = {"all": [], "none": index_names(path)}.get(variant, [variant])
            with sqlite3.connect(path) as side:
                for name in dropped:
                    side.execute(f'DROP INDEX "{name}"')

            def run(count: int) -> None:
                for _ in range(count):
                    occurrence_id = next(ids)
                    claim = kernel.claim(occurrence_id, owner="bench")
                    assert claim is not None, f"occurrence {occurrence_id} not claimable"
                    kernel.succeed(occurrence_id, owner="bench", fence=claim.fence)

            run(WARM_PAIRS)
            with sqlite3.connect(path) as side:
                side.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                page = side.execute("PRAGMA page_size").fetchone()[0]
            run(frames_pairs)
            frames = os.path.getsize(f"{path}-wal") / (page + 24) / frames_pairs
            started = time.process_time()
            run(pairs)
            cpu = (time.process_time() - started) / pairs * 1e6
        finally:
            kernel.close()
    return frames, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1000, help="timed pairs a variant")
    parser.add_argument("--frames-pairs", type=int, default=40, help="pairs whose WAL is counted")
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="NORMAL")
    parser.add_argument(
        "--variants", help="comma-separated: all, none, index names (default: all, none, each)"
    )
    args = parser.parse_args()
    if args.frames_pairs * 20 > 1000:
        parser.error("--frames-pairs over 50 can pass the 1,000-page auto-checkpoint")
    if args.variants:
        variants = args.variants.split(",")
    else:
        with tempfile.TemporaryDirectory() as workdir:
            Kernel.open(f"sqlite:///{workdir}/k.db", migrate_schema=True).close()
            variants = ["all", "none", *index_names(f"{workdir}/k.db")]
    print(f"{args.pairs} pairs a variant, synchronous={args.synchronous}; '-' = that index dropped")
    print(f"{'variant':40s} {'frames':>7s} {'CPU µs':>7s}")
    for variant in variants:
        frames, cpu = measure(variant, args.pairs, args.frames_pairs, args.synchronous)
        label = variant if variant in ("all", "none") else f"-{variant}"
        print(f"{label:40s} {frames:7.1f} {cpu:7.0f}", flush=True)


if __name__ == "__main__":
    main()
