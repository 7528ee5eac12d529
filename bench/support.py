"""What the benchmarks share: the test servers, a server to run on, a fresh database.

PostgreSQL and Redis come from ``tests/servers.py`` (as an unprivileged user when run
as root, on 127.0.0.1 and ephemeral ports) unless the caller names a running server.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Literal

__all__ = [
    "CpuMeter",
    "RssSampler",
    "children",
    "fresh_database",
    "postgres_durability",
    "process_tree_memory",
    "server",
    "servers",
]

_SERVERS_PATH = Path(__file__).resolve().parents[1] / "tests" / "servers.py"
_SERVERS_MODULE = "kernel_test_servers"


def servers() -> ModuleType:
    """tests/servers.py, imported by path once per process (tests/ is not a package)."""
    module = sys.modules.get(_SERVERS_MODULE)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(_SERVERS_MODULE, _SERVERS_PATH)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{_SERVERS_PATH} not found")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]  # a half-run module must not be handed out next time
        raise
    return module


@contextmanager
def server(
    kind: Literal["postgres", "redis"],
    url: str | None = None,
    *,
    durable: bool = False,
    settings: dict[str, str] | None = None,
) -> Iterator[str]:
    """Yield ``url`` when given; else start a server of ``kind``, yield its URL, stop it.

    ``durable`` starts PostgreSQL with its own durability defaults (``fsync`` and
    ``synchronous_commit`` on) rather than the test suite's fast, unsafe settings;
    ``settings`` are more PostgreSQL settings.
    """
    if url:
        yield url
        return
    options = {"durable": durable, "settings": settings} if kind == "postgres" else {}
    running = getattr(servers(), f"start_{kind}")(**options)
    try:
        yield running.url
    finally:
        running.stop()


@contextmanager
def fresh_database(server_url: str | None, prefix: str) -> Iterator[str]:
    """A fresh, empty database URL, removed afterwards.

    A new database on the PostgreSQL server at ``server_url``; without one, a SQLite
    file in a temporary directory named with ``prefix``.
    """
    if server_url is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield f"sqlite:///{tmp}/kernel.db"
        return
    with servers().fresh_database(server_url) as url:
        yield url


def postgres_durability(server_url: str) -> str:
    """``fsync=on synchronous_commit=on full_page_writes=on`` as the server reports them."""
    import psycopg

    names = ("fsync", "synchronous_commit", "full_page_writes")
    with psycopg.connect(servers().libpq_url(server_url)) as conn:
        values = [conn.execute(f"SHOW {name}").fetchone() for name in names]
    pairs = zip(names, values, strict=True)
    return " ".join(f"{name}={row[0] if row else '?'}" for name, row in pairs)


@contextmanager
def peer_servers(postgres_url: str | None, prefix: str) -> Iterator[tuple[str, str, str, Path]]:
    """What a bench beside the PostgreSQL peers runs on: a Redis broker, a durable
    PostgreSQL (``postgres_url``, else one started here), that server's durability as
    :func:`postgres_durability` reports it, and a work folder named with ``prefix``;
    all stopped or removed afterwards."""
    with (
        server("redis") as broker_url,
        server("postgres", postgres_url, durable=True) as pg_url,
        tempfile.TemporaryDirectory(prefix=prefix) as workdir,
    ):
        yield broker_url, pg_url, postgres_durability(pg_url), Path(workdir)


def children(pid: int) -> list[int]:
    """``pid``'s child processes (a prefork pool's children), from
    ``/proc/PID/task/TID/children``; none once it is gone."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return [int(c) for task in tasks for c in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def process_tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of ``pid`` and all its descendants.

    RSS is VmRSS (``/proc/PID/status``): a page shared by a prefork pool's children
    counts once per process. PSS (``/proc/PID/smaps_rollup``) divides each shared page
    among the processes sharing it: what the tree costs the machine. A process that
    exits while being read counts as zero; a pool's children are found through
    ``/proc/PID/task/TID/children``.
    """
    rss = pss = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            rollup = Path(f"/proc/{current}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        pending.extend(children(current))
        rss += _kib_field(status, "VmRSS:")
        pss += _kib_field(rollup, "Pss:")
    return rss, pss


def _kib_field(text: str, name: str) -> int:
    for line in text.splitlines():
        if line.startswith(name):
            return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """Samples the summed RSS and PSS of process trees every ``interval`` s inside a ``with``.

    ``peak_mb`` / ``peak_pss_mb`` are the largest sums seen in one sample (each pid with
    its descendants): what the workers held at their busiest.
    """

    def __init__(self, pids: list[int], interval: float = 0.2) -> None:
        self.pids = pids
        self.interval = interval
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            trees = [process_tree_memory(pid) for pid in self.pids]
            self.samples.append((sum(t[0] for t in trees), sum(t[1] for t in trees)))
            if self._stop.wait(self.interval):
                return

    @property
    def peak_mb(self) -> float:
        return max((rss for rss, _ in self.samples), default=0) / 2**20

    @property
    def peak_pss_mb(self) -> float:
        return max((pss for _, pss in self.samples), default=0) / 2**20


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(pid: int) -> tuple[float, float]:
    """(own, reaped children's) user+system CPU seconds of ``pid``; zeros once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0, 0.0
    # After the command's ")": state is field 3, so utime..cstime (14..17) sit at 11..14.
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) * _TICK_S, (cutime + cstime) * _TICK_S


def _machine_cpu_s() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot, summed over its cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) * _TICK_S, sum(values[:8]) * _TICK_S


def _context_switches(pid: int) -> int:
    """Voluntary plus involuntary context switches of ``pid`` so far; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    fields = ("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
    return sum(int(line.split()[1]) for line in status.splitlines() if line.startswith(fields))


class CpuMeter:
    """CPU seconds spent inside a ``with``: by a worker's main process, by its pool, by this
    process (publishing and polling), and by everything else on the machine; and the
    context switches of the pool's processes (``pool_switches``; a child that exits
    meanwhile takes its count with it).

    ``others`` (Redis, PostgreSQL, any other load) is the machine's busy time less the
    three measured parts; ``busy_share`` is the machine's busy time over its capacity
    (cores x wall time): near 1.0 the run was bound by CPU, well below by waiting.
    """

    def __init__(self, worker_pid: int) -> None:
        self.worker_pid = worker_pid
        self.parts: dict[str, float] = {}
        self.busy_share = 0.0
        self.pool_switches = 0

    def _read(self) -> tuple[float, float, float, float, float]:
        own, reaped = _process_cpu_s(self.worker_pid)
        pool = reaped + sum(sum(_process_cpu_s(c)) for c in children(self.worker_pid))
        busy, total = _machine_cpu_s()
        return own, pool, sum(os.times()[:2]), busy, total

    def _pool_switches(self) -> dict[int, int]:
        return {pid: _context_switches(pid) for pid in children(self.worker_pid)}

    def __enter__(self) -> CpuMeter:
        self._start_switches = self._pool_switches()
        self._start = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        main, pool, bench, busy, total = (
            end - start for end, start in zip(self._read(), self._start, strict=True)
        )
        self.parts = {"main": main, "pool": pool, "bench": bench}
        self.parts["others"] = max(0.0, busy - main - pool - bench)
        self.busy_share = busy / total if total else 0.0
        ended = self._pool_switches()
        self.pool_switches = sum(
            count - self._start_switches.get(pid, 0) for pid, count in ended.items()
        )
