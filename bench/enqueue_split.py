"""Where a batch's wall time goes: ``celery_app.enqueue_many`` of ``--batch`` runs in a loop,
through Redis and each back end, its parts timed on the wall clock (and this process's CPU).

Parts: ``requests`` (celery_app's per-run requests), ``prepare`` (the kernel's rows), the
rows' ``params`` (their JSON texts), ``statements`` (the statements sent and answered one
at a time on the driver: on PostgreSQL the server's execution and the round trip, on
SQLite sqlite3's own work in this process; a pipelined batch's are not in it), ``insert``
(the rows' statements from the first sent to the last answer read, ``params`` in it and,
where the rows are made while they are sent, ``prepare`` too), ``commit``, ``publish``
(the hints), and ``rest`` (the whole call less all but ``insert``: the answers, the
session, the layers, and a pipelined batch's waits for the server).

    .venv/bin/python bench/enqueue_split.py --batch 500 --rounds 60
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.enqueue import TASK, _kernel_app  # noqa: E402
from bench.support import fresh_database, peer_servers  # noqa: E402

__all__ = ["main"]

#: part -> [wall seconds, CPU seconds] summed over the round being timed.
SPENT: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])


def _timing(part: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent = SPENT[part]
            spent[0] += time.perf_counter() - wall
            spent[1] += time.process_time() - cpu

    return timed


def _instrument() -> None:
    """Wrap each part where its callers look it up."""
    import celery_app.enqueueing as ce
    import kernel.db.driver as driver
    import kernel.db.engine as engine
    import kernel.jobs.enqueueing as je
    import kernel.occurrences.rows as rows
    import kernel.statements as st

    ce._requests = _timing("requests", ce._requests)
    ce._publish = _timing("publish", ce._publish)
    try:  # where the rows are made: a batch's own module, else the enqueue's (before it)
        import kernel.jobs.batch_rows as made_in
    except ImportError:
        made_in = je  # type: ignore[assignment]
    made_in.prepare = _timing("prepare", made_in.prepare)  # type: ignore[attr-defined]
    for name in ("insert_enqueued", "insert_chunks"):
        if hasattr(je, name):
            setattr(je, name, _timing("insert", getattr(je, name)))
    engine.end_write = _timing("commit", engine.end_write)
    import kernel.transaction.session as session

    session.end_write = engine.end_write
    rows.st = _Statements(st)  # type: ignore[assignment]
    driver.send = _timing("statements", driver.send)


class _Statements:
    """kernel.statements, its ``enqueue_params`` timed."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.enqueue_params = _timing("params", module.enqueue_params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _split(app: Any, batch: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Median ms per batch of each part (wall, CPU) over ``rounds`` batches."""
    from celery_app import enqueue_many

    runs = [{"task": TASK, "args": [i]} for i in range(batch)]
    for _ in range(3):
        enqueue_many(app, runs)
    seen: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _ in range(rounds):
        SPENT.clear()
        whole = _timing("whole", enqueue_many)
        whole(app, runs)
        parts = {k: tuple(v) for k, v in SPENT.items()}
        named = sum(v[0] for k, v in parts.items() if k not in NESTED)
        named_cpu = sum(v[1] for k, v in parts.items() if k not in NESTED)
        parts["rest"] = (parts["whole"][0] - named, parts["whole"][1] - named_cpu)
        for part, (wall, cpu) in parts.items():
            seen[part].append((wall * 1e3, cpu * 1e3))
    return {
        part: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for part, v in seen.items()
    }


ORDER = (
    "requests",
    "prepare",
    "params",
    "statements",
    "insert",
    "commit",
    "publish",
    "rest",
    "whole",
)
#: Parts inside others, or the whole: not subtracted for ``rest``.
NESTED = ("whole", "insert")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args(argv)
    _instrument()
    with peer_servers(args.postgres_url, "bench-split-") as (broker_url, pg_url, _, workdir):
        backends = {"sqlite": ("SQLite", None), "postgres": ("PostgreSQL", pg_url)}
        for name, server_url in (backends[b] for b in args.backends.split(",")):
            with (
                fresh_database(server_url, "bench-split-") as url,
                _kernel_app(broker_url, url, workdir) as app,
            ):
                split = _split(app, args.batch, args.rounds)
            print(f"{name}: ms per batch of {args.batch}, median of {args.rounds} (wall / CPU)")
            for part in ORDER:
                wall, cpu = split.get(part, (0.0, 0.0))
                print(f"  {part:<11} {wall:8.2f} {cpu:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
