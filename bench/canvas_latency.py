"""How long a routed chain and chord take end to end, against stock Celery's on the same worker.

One app, one ``celery worker -c 2`` and one Beat at its default interval (``--beat-interval``
to change it) on a fresh Redis (broker and result backend) and a SQLite kernel (or
``--postgres``): ``latproj.routed.*`` tasks go through the kernel (``kernel_route_tasks``),
``latproj.stock.*`` do not. Each round times, per side and in turn, from ``apply_async`` to
``.get()``: a chain of ``--length`` additions, and a chord of ``--width`` additions whose
body sums them. What separates the sides is how each step reaches a worker: stock's worker
publishes the next step when the one before it ends; the kernel's step is made by the
settle and its hint published by the settling process once the settle commits.

    .venv/bin/python bench/canvas_latency.py                     # 20 rounds, chain of 5, chord of 4
    .venv/bin/python bench/canvas_latency.py --rounds 5 --postgres
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.support import fresh_database, server  # noqa: E402
from bench.workers import Worker, worker_env  # noqa: E402

APP = """\
from celery import Celery
from celery_app import install

app = install(Celery("latproj"))
app.conf.update(result_backend=app.conf.broker_url, kernel_route_tasks=["latproj.routed.*"])

def add(x, y):
    return x + y

def tsum(values):
    return sum(values)

for side in ("routed", "stock"):
    for body in (add, tsum):
        app.task(name=f"latproj.{side}.{body.__name__}")(body)
"""

SIDES = ("stock", "routed")
GET_TIMEOUT_S = 60.0


def canvases(app: Any, length: int, width: int) -> dict[str, Callable[[str], float]]:
    """Per canvas, a function timing one of it on a side, in seconds."""
    from celery import chain, chord

    def task(side: str, name: str) -> Any:
        return app.tasks[f"latproj.{side}.{name}"]

    def timed(make: Callable[[], Any], expected: int) -> float:
        started = time.monotonic()
        got = make().get(timeout=GET_TIMEOUT_S)
        elapsed = time.monotonic() - started
        if got != expected:
            raise RuntimeError(f"expected {expected}, got {got!r}")
        return elapsed

    def run_chain(side: str) -> float:
        add = task(side, "add")
        steps = [add.s(1, 1), *(add.s(1) for _ in range(length - 1))]
        return timed(lambda: chain(*steps).apply_async(), length + 1)

    def run_chord(side: str) -> float:
        add, tsum = task(side, "add"), task(side, "tsum")
        header = [add.s(i, i) for i in range(width)]
        return timed(lambda: chord(header)(tsum.s()), width * (width - 1))

    return {f"chain of {length}": run_chain, f"chord of {width}": run_chord}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed canvases per side and kind")
    parser.add_argument("--length", type=int, default=5, help="steps of the chain")
    parser.add_argument("--width", type=int, default=4, help="members of the chord's header")
    parser.add_argument("--beat-interval", type=float, default=1.0, help="Beat's tick (s)")
    parser.add_argument("--postgres", action="store_true", help="the kernel on PostgreSQL")
    args = parser.parse_args(argv)

    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="canvas-lat-")))
        (workdir / "latproj.py").write_text(APP)
        broker = stack.enter_context(server("redis"))
        database = f"sqlite:///{workdir / 'kernel.db'}"
        if args.postgres:
            database = stack.enter_context(
                fresh_database(stack.enter_context(server("postgres", durable=True)), "lat")
            )
        env = worker_env(
            workdir,
            broker,
            KERNEL_DATABASE_URL=database,
            KERNEL_VAR_DIR=str(workdir / "var"),
            KERNEL_BEAT_INTERVAL=str(args.beat_interval),
        )
        worker = Worker(workdir, env, 2, app="latproj")
        stack.callback(worker.stop)
        beat = Worker(workdir, env, 0, app="latproj", command="beat")
        stack.callback(beat.stop)

        # This process is the app's caller: the same settings as its worker.
        os.environ.update({k: v for k, v in env.items() if k.startswith(("CELERY_", "KERNEL_"))})
        sys.path.insert(0, str(workdir))
        import latproj  # type: ignore[import-not-found]

        app = latproj.app

        def alive() -> None:
            worker.check_alive()
            beat.check_alive()

        kinds = canvases(app, args.length, args.width)
        times: dict[tuple[str, str], list[float]] = {}
        # Warm-up (waiting out the worker's start): the jobs defined, each process's first call.
        for run in kinds.values():
            for side in SIDES:
                run(side)
        for _ in range(args.rounds):
            for kind, run in kinds.items():
                for side in SIDES:
                    times.setdefault((kind, side), []).append(run(side))
                    alive()

    backend = "PostgreSQL" if args.postgres else "SQLite"
    print(
        f"{args.rounds} rounds per side; worker -c 2, Beat every {args.beat_interval:g}s; "
        f"Redis broker and backend; kernel on {backend}"
    )
    print(f"{'canvas':<14}{'side':<8}{'p50 ms':>9}{'p95 ms':>9}{'p50 ÷ stock':>13}")
    for kind in kinds:
        stock_p50 = statistics.median(times[(kind, "stock")])
        for side in SIDES:
            values = times[(kind, side)]
            p50 = statistics.median(values)
            p95 = statistics.quantiles(values, n=20, method="inclusive")[18]
            ratio = p50 / stock_p50
            print(f"{kind:<14}{side:<8}{p50 * 1000:>9.1f}{p95 * 1000:>9.1f}{ratio:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
