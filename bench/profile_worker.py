"""Where a kernel run's time goes: py-spy on the busy pool processes, cProfile on pairs.

For each back end (SQLite in WAL mode with ``synchronous=FULL``, PostgreSQL with its
durable defaults) this starts the product's ``celery worker -c 2`` on Redis as
``end_to_end.py`` does, warms it up, then records every pool process with
``py-spy record --idle`` while ``--n`` occurrences run through it, and prints:

* the split of the pool processes' wall time: waiting for a message (idle), SQL
  round trips / driver, commit (fsync on SQLite, the WAL flush on PostgreSQL),
  kernel Python, the runtime (``celery_app/``, ``adapters/``), the body, Celery;
* the top functions by own time (py-spy samples, leaf frame);
* the same for the worker's main process, which receives each message, hands it to
  a pool process and acknowledges it.

Then cProfile on ``--pairs`` one-process ``Kernel.claim`` + ``Kernel.succeed`` pairs
in this process (no Celery): the same split by function and the top functions by
own time. py-spy comes from the ``bench`` extra and needs ptrace rights (root, or
``kernel.yama.ptrace_scope=0``).

Run from the repository root::

    .venv/bin/python bench/profile_worker.py --quick
    .venv/bin/python bench/profile_worker.py --n 3000 --backends postgres
    .venv/bin/python bench/profile_worker.py --n 3000 --batch-max 1   # one id per message
    .venv/bin/python bench/profile_worker.py --on-cpu   # where the CPU goes, not the wall time
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.end_to_end import BATCH_MAX, KernelRuns, kernel_worker  # noqa: E402
from bench.support import children, fresh_database, postgres_durability, server  # noqa: E402
from bench.workers import broker_db  # noqa: E402

__all__ = ["classify", "main"]

BACKENDS = ("sqlite", "postgres")
TOP = 15
CATEGORIES = (
    "idle",
    "SQL/driver",
    "commit",
    "SQLAlchemy",
    "lock wait",
    "kernel Python",
    "runtime",
    "body",
    "Celery",
    "other",
)
# Leaf functions in which a pool process waits for its next message.
_WAITS = {"select", "poll", "epoll", "_recv", "recv", "_wait_for", "wait"}


def _frame_file(frame: str) -> str:
    """``func (path:line)`` -> ``path``."""
    start = frame.rfind("(")
    return frame[start + 1 :].rsplit(":", 1)[0] if start >= 0 else ""


def _frame_func(frame: str) -> str:
    return frame.split(" (", 1)[0]


def _is_commit(frame: str) -> bool:
    """A COMMIT in the driver or SQLAlchemy (sqlite3's C method, psycopg, do_commit), the
    kernel's own (``end_write`` sends SQLite's as text), or SQLite's WAL synced after the
    writer gate (``KeptWal.sync`` or ``sync_wal``: the fsync a FULL commit would make inside it)."""
    file, func = _frame_file(frame), _frame_func(frame)
    if "'commit'" in func:
        return "sqlite3" in func or "psycopg" in func
    name = func.split(".")[-1]
    if file.endswith(("kernel/db/engine.py", "kernel/db/writer_gate.py")):
        return name in ("end_write", "sync", "sync_wal")
    return name in ("commit", "do_commit") and ("psycopg" in file or "sqlalchemy" in file)


def _category(frame: str) -> str:
    """The category of one frame by its own file and function, or ``""`` when unknown."""
    file, func = "/" + _frame_file(frame).replace("\\", "/"), _frame_func(frame)
    name = func.split(".")[-1]
    if "/redis/" in file:
        return ""  # the broker or the body's counter: its caller says which
    if "sqlite3." in func or "/psycopg" in file or "/socket" in file:
        return "SQL/driver"
    # The kernel's driver calls: py-spy sees no C frame under them, so their own time is
    # the driver's (sqlite3's execute, psycopg's) more than their few lines.
    if file.endswith("/kernel/db/driver.py") and name in ("send", "finish"):
        return "SQL/driver"
    if "/sqlalchemy/" in file:
        return "SQLAlchemy"
    if file.endswith("/kernel/db/writer_gate.py"):
        return "lock wait"
    if "/kernel/" in file and "site-packages" not in file:
        return "kernel Python"
    if ("/celery_app/" in file or "/adapters/" in file) and "site-packages" not in file:
        return "runtime"
    if "/bench/counter" in file or file.endswith("/counter.py"):
        return "body"
    if name in _WAITS:
        return "idle"
    if any(part in file for part in ("/celery/", "/billiard/", "/kombu/", "/vine/")):
        return "Celery"
    return ""


def classify(stack: Sequence[str]) -> str:
    """The category of one sample or call, given its frames outermost first.

    The innermost frame decides; a frame of no category of its own (the standard
    library, a C method, redis) takes its caller's, so ``json.dumps`` under the
    kernel is kernel Python and a Redis call under the body is the body.
    """
    if any(_is_commit(frame) for frame in stack):
        return "commit"
    for frame in reversed(stack):
        category = _category(frame)
        if category:
            return category
    return "other"


def _split(weights: Iterable[tuple[Sequence[str], float]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for stack, weight in weights:
        category = classify(stack)
        totals[category] = totals.get(category, 0.0) + weight
    return totals


def _format_split(split: dict[str, float], unit: str) -> str:
    total = sum(split.values()) or 1.0
    return (
        "  ".join(
            f"{cat} {100 * split.get(cat, 0) / total:.0f}%" for cat in CATEGORIES if split.get(cat)
        )
        + f"   ({total:.0f} {unit})"
    )


# -- py-spy on the pool ---------------------------------------------------------------


def _read_raw(path: Path) -> list[tuple[list[str], float]]:
    """py-spy's ``--format raw`` (collapsed stacks): ``frame;frame;... count`` per line."""
    samples = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            # The first frame names the process/thread; keep the code frames.
            frames = [f for f in stack.split(";") if "(" in f]
            # Only the thread that runs tasks: others (the lease keeper) start in threading.
            if frames and not ("_bootstrap" in frames[0] and "threading.py" in frames[0]):
                samples.append((frames, float(count)))
    return samples


def _spy(
    pids: list[int], workdir: Path, on_cpu: bool
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    procs, outputs = [], []
    for pid in pids:
        out = workdir / f"pool-{pid}.txt"
        argv = [py_spy, "record", *([] if on_cpu else ["--idle"]), "--format", "raw"]
        argv += ["--rate", "200"]
        argv += ["--nonblocking", "-o", str(out), "-p", str(pid)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        outputs.append(out)
    return procs, outputs


def profile_pool(
    runs: KernelRuns, n: int, workdir: Path, on_cpu: bool = False
) -> tuple[list[tuple[list[str], float]], list[tuple[list[str], float]]]:
    """py-spy samples of every pool process, and of the worker's main process (the
    consumer that receives, dispatches and acknowledges), while ``n`` occurrences run."""
    main = runs.worker.pid
    procs, outputs = _spy([main, *children(main)], workdir, on_cpu)
    try:
        runs.run(n)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            if proc.returncode not in (0, -signal.SIGINT) and err:
                print(f"py-spy: {err.decode(errors='replace').strip()[-500:]}", file=sys.stderr)
    main_out, pool_outs = outputs[0], outputs[1:]
    pool = [sample for out in pool_outs if out.exists() for sample in _read_raw(out)]
    return pool, _read_raw(main_out) if main_out.exists() else []


def _top_leaves(samples: list[tuple[list[str], float]]) -> list[str]:
    own: Counter[str] = Counter()
    for stack, count in samples:
        if stack:
            own[stack[-1]] += int(count)
    total = sum(own.values()) or 1.0
    return [f"{100 * c / total:5.1f}%  {frame}" for frame, c in own.most_common(TOP)]


# -- cProfile on one-process pairs -------------------------------------------------------


def profile_pairs(runs: KernelRuns, n: int) -> pstats.Stats:
    ids = runs.occurrences.create(n)  # made before the profile starts: pairs only
    profile = cProfile.Profile()
    profile.enable()
    runs.claim_and_succeed(ids)
    profile.disable()
    return pstats.Stats(profile)


def _pstats_rows(
    stats: pstats.Stats,
) -> tuple[list[tuple[list[str], float]], list[tuple[float, str]]]:
    """([caller, function] frames with the own seconds spent under that caller), and
    (own seconds, label) per function.

    cProfile keeps one caller level and splits a function's own time by caller, so
    ``wait`` under ``commit`` counts as commit and under ``execute`` as SQL.
    """
    split: list[tuple[list[str], float]] = []
    own: list[tuple[float, str]] = []
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]]
    raw = stats.stats  # type: ignore[attr-defined]
    for (file, line, func), (_, _, tottime, _, callers) in raw.items():
        frame = f"{func} ({file}:{line})"
        own.append((tottime, f"{func} ({Path(file).name}:{line})"))
        if not callers:
            split.append(([frame], tottime))
        for (c_file, c_line, c_func), timing in callers.items():
            split.append(([f"{c_func} ({c_file}:{c_line})", frame], float(timing[2])))
    return split, own


def _report(
    backend: str,
    pool: list[tuple[list[str], float]],
    main: list[tuple[list[str], float]],
    stats: pstats.Stats,
    on_cpu: bool,
) -> None:
    seen = "on-CPU samples only" if on_cpu else "wall time incl. idle"
    print(f"\n== {backend}: pool processes (py-spy, {seen})")
    print("split:", _format_split(_split(pool), "samples"))
    print("top functions by own time:")
    print("\n".join(_top_leaves(pool)))
    print(f"\n== {backend}: the worker's main process (py-spy, its main thread)")
    print("split:", _format_split(_split(main), "samples"))
    print("top functions by own time:")
    print("\n".join(_top_leaves(main)))
    split_rows, own = _pstats_rows(stats)
    print(f"\n== {backend}: one-process claim+succeed pairs (cProfile)")
    split = _split((frames, seconds * 1000) for frames, seconds in split_rows)
    print("split:", _format_split(split, "ms"))
    total = sum(s for s, _ in own) or 1.0
    print("top functions by own time:")
    for seconds, label in sorted(own, reverse=True)[:TOP]:
        print(f"{100 * seconds / total:5.1f}%  {seconds * 1000:8.1f} ms  {label}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, help="occurrences run under py-spy (2000; --quick 300)")
    parser.add_argument("--pairs", type=int, help="cProfiled pairs (1000; --quick 300)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument(
        "--batch-max",
        type=int,
        default=BATCH_MAX,
        help=f"ids per message (default {BATCH_MAX}: the backlog; 1: the shallow case)",
    )
    parser.add_argument(
        "--on-cpu",
        action="store_true",
        help="sample the worker's processes only while they run (py-spy without --idle)",
    )
    parser.add_argument("--postgres-url", help="use this server instead of starting a durable one")
    args = parser.parse_args(argv)
    n = args.n or (300 if args.quick else 2000)
    pairs = args.pairs or (300 if args.quick else 1000)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        broker_url = broker_db(stack.enter_context(server("redis")), 0)
        pg_url = None
        if "postgres" in args.backends:
            pg_url = stack.enter_context(server("postgres", args.postgres_url, durable=True))
            print(f"PostgreSQL: {postgres_durability(pg_url)}; SQLite: WAL, synchronous=FULL")
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-prof-")))
        for backend in args.backends:
            with ExitStack() as per_backend:
                server_url = pg_url if backend == "postgres" else None
                url = per_backend.enter_context(fresh_database(server_url, "kernel-prof-"))
                kernel, worker, publisher = kernel_worker(
                    per_backend, broker_url, url, args.concurrency
                )
                runs = KernelRuns(kernel, publisher, broker_url, worker, batch_max=args.batch_max)
                runs.run(min(300, n))  # warm: the pool is up and has run the job before
                pool, consumer = profile_pool(runs, n, workdir, args.on_cpu)
                stats = profile_pairs(runs, pairs)
                _report(backend, pool, consumer, stats, args.on_cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
