"""Chaos run: faults injected into a multi-host deployment while a mixed workload runs.

``.venv/bin/python bench/chaos.py --minutes N [--broker redis|rabbitmq]`` (as root) makes
a services host and three worker hosts from network namespaces
(``tests/multihost/netns.py``), runs PostgreSQL and the broker (Redis, or Debian's
RabbitMQ with durable queues and ``task_acks_late``) on the first, a worker on each of
the others and Beats on two (one host's clock 5 minutes ahead, another's 5 minutes
behind), and injects the faults in turn, one every ``--spacing`` seconds, until the
time is up: kill -9 of a worker's main process, of a pool child and of a Beat; SIGSTOP
past the lease; PostgreSQL immediate and fast restarts; the broker killed with -9 and
restarted with its queue lost and with it kept; a partition of one host, 40 % packet
loss on one host's link and a throttled (congested, high-latency) link, each healed
later; an operator's ``kernel pause`` of a running checkpointing occurrence and its
``kernel resume``; a warm shutdown (SIGTERM) of a worker whose checkpointing runs hand
back and resume elsewhere. All along, a driver on the services host applies canvases
through the product's app every ``--canvas-every`` seconds
(``tests/multihost/chaos_canvas.py``: a routed chord whose body records its members'
results, a chain of 3, a member and a task failing on purpose with their errbacks),
judged by ``tests/multihost/canvas_checker.py``. Then, on one host with SQLite on a
small tmpfs, the disk is filled and freed again. Every job appends to an external
ledger; the checker (``tests/multihost/checker.py``) judges it with the kernel's rows and events and
prints what each injection did and saw, then a table per fault. Exit status: 0 clean,
1 on any violation, 3 when namespaces cannot be made here. ``--self-test`` judges a
made-up clean run and one mutant per violation instead (no root needed).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from integration.stack import Proc, wait_until  # noqa: E402
from multihost.checker import Row, check  # noqa: E402
from multihost.cluster import (  # noqa: E402
    LEASE_S,
    MULTIHOST_DIR,
    QUEUE,
    Cluster,
    HostPlan,
    job_specs,
    workload_env,
)
from multihost.evidence import (  # noqa: E402
    Evidence,
    Expectation,
    FaultRecord,
    every,
    read_kernel,
    read_ledger,
)
from multihost.mutations import self_test  # noqa: E402
from multihost.netns import Network, NetworkUnavailable, join_namespace  # noqa: E402
from multihost.report import failed, report  # noqa: E402

from kernel import Kernel  # noqa: E402

UNAVAILABLE = 3
SKEW_S = 300.0
#: Seconds before the first fault and after the last injection (firings due then are owed).
_BASELINE_S = 8.0
_DRAIN_S = 60.0
_DISK_PHASE_S = 24.0
#: The checker's canvas columns: a canvas still under way when judged is one of these.
_CANVAS = ("chord", "chain", "link")

#: A fault's action returns what it injected, for the run's report.
Fault = tuple[str, Callable[[Cluster, int], str]]

#: The broker's crash faults are named after it: ``redis_kill_lost``, ``rabbitmq_kill_kept``...
FAULTS: list[Fault] = [
    ("kill_worker_main", lambda c, i: c.kill_worker_main(c.busy_host(["h1", "h3"]))),
    ("kill_pool_child", lambda c, i: c.kill_pool_child(c.busy_host(["h3", "h1", "h2"]))),
    ("kill_beat", lambda c, i: c.kill_beat(c.host(["h1", "h2"][i % 2]))),
    ("freeze_worker", lambda c, i: c.freeze_worker(c.busy_host(["h2", "h1"]), LEASE_S + 3)),
    ("pg_immediate", lambda c, i: c.restart_postgres("immediate")),
    ("pg_fast", lambda c, i: c.restart_postgres("fast")),
    ("{broker}_kill_lost", lambda c, i: c.broker.crash_and_restart(kept=False)),
    ("{broker}_kill_kept", lambda c, i: c.broker.crash_and_restart(kept=True)),
    ("partition", lambda c, i: c.partition(c.busy_host(["h3", "h1"]), LEASE_S + 5)),
    ("lossy_link", lambda c, i: c.lossy_link(c.busy_host(["h1", "h3"]), 40, LEASE_S + 5)),
    ("slow_link", lambda c, i: c.slow_link(c.busy_host(["h3", "h2"]), "96kbit", LEASE_S + 5)),
    ("pause_resume", lambda c, i: c.pause_and_resume(2.0)),
    ("warm_shutdown", lambda c, i: c.warm_shutdown(["h2", "h1", "h3"])),
]


def expectations(first: float, last: float) -> list[Expectation]:
    """What each workload job owes between ``first`` and ``last`` (see ``job_specs``)."""
    seconds = {"1s": 1, "2s": 2, "10s": 10}
    return [
        every(spec["id"], spec["delivery"], seconds[spec["schedule"]["every"]], first, last)
        for spec in job_specs(Path("unused"))
    ]


class LeaseSampler(threading.Thread):
    """Every second: is any running occurrence's lease longer than the database clock allows?

    Reads through the kernel's Python API, which must answer a database outage with
    STORAGE_UNAVAILABLE; anything else it raises is recorded too.
    """

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(name="lease-sampler", daemon=True)
        self.cluster = cluster
        #: (when, what): leases beyond the database clock, kernel reads that raised.
        self.errors: list[tuple[float, str]] = []
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        kernel = Kernel.open(self.cluster.postgres.url)
        try:
            while not self.done.wait(1.0):
                try:
                    found = self.cluster.lease_overreach(kernel)
                except Exception as exc:  # the finding is the exception itself
                    found = [f"kernel read raised {type(exc).__name__}: {exc}"[:240]]
                self.errors += [(time.time(), what) for what in found]
                self.samples += 1
        finally:
            kernel.close()


def judge(
    cluster: Cluster,
    faults: list[FaultRecord],
    owed: list[Expectation],
    errors: list[tuple[float, str]],
) -> list[Row]:
    """The checker's rows for the multi-host phase as the ledger and the kernel stand now."""
    lines, rows, events = cluster.kernel_state()
    return check(
        Evidence(
            lines=lines,
            rows=rows,
            events=events,
            faults=faults,
            expectations=owed,
            judged_at=time.time(),
            skews=cluster.skews,
            handbacks=cluster.handbacks,
            exits=cluster.exits,
            errors=errors,
        )
    )


def wait_drained(judged: Callable[[], list[Row]], revive: Callable[[], None]) -> None:
    """Give late firings, and the runs that resume what a pause or a warm shutdown
    handed back, up to ``_DRAIN_S`` to finish before the run is judged."""

    def settled() -> bool:
        revive()
        pending = ("lost", "stuck", "handback", *_CANVAS)
        return not any(row.counts[column] for row in judged() for column in pending)

    with contextlib.suppress(AssertionError):
        wait_until(settled, timeout=_DRAIN_S, what="late firings", interval=2.0)


def canvas_driver(cluster: Cluster, seconds: float, every_s: float) -> Proc:
    """The canvas firings' driver, on the services host (the harness's) with the
    workers' configuration: a user's process applying canvases through the product."""
    argv = [sys.executable, str(MULTIHOST_DIR / "chaos_canvas.py"), str(cluster.ledger),
            "--every", str(every_s), "--seconds", str(seconds)]  # fmt: skip
    return Proc("canvas-driver", argv, cwd=cluster.run_dir, env=cluster.env)


def multi_host_phase(
    seconds: float, spacing: float, run_dir: Path, broker: str, canvas_every_s: float
) -> list[Row]:
    network = Network(workers=3)
    try:
        join_namespace(network.services.namespace)  # the harness sits on the services host
        plans = [
            HostPlan(beat=True),
            HostPlan(beat=True, skew_s=SKEW_S),
            HostPlan(beat=False, skew_s=-SKEW_S),
        ]
        cluster = Cluster(network, run_dir, plans, broker)
        try:
            cluster.start()
            return _inject(cluster, seconds, spacing, broker, canvas_every_s)
        finally:
            cluster.stop()
    finally:
        network.remove()


def _inject(
    cluster: Cluster, seconds: float, spacing: float, broker: str, canvas_every_s: float
) -> list[Row]:
    first = time.time()
    sampler = LeaseSampler(cluster)
    sampler.start()
    driver = canvas_driver(cluster, seconds, canvas_every_s)
    print(f"workload running on {len(cluster.network.workers)} hosts; faults every {spacing:.0f}s")
    time.sleep(_BASELINE_S)
    faults: list[FaultRecord] = []
    end = first + seconds
    rounds = 0
    while time.time() < end - spacing or not rounds:
        for name, action in FAULTS:
            if time.time() >= end - spacing and rounds:
                break
            cluster.revive()
            at = time.time()
            print(f"{time.strftime('%H:%M:%S')} {name.format(broker=broker)}", flush=True)
            injected = action(cluster, rounds)
            print(f"  {injected}", flush=True)
            faults.append(FaultRecord(name.format(broker=broker), at, injected))
            time.sleep(max(0.0, at + spacing - time.time()))
        rounds += 1
    if driver.popen.poll() not in (None, 0):  # it stopped applying: the canvases proved less
        sampler.errors.append((time.time(), f"canvas driver exited:\n{driver.tail()}"[:600]))
    driver.expected_exit = True
    driver.terminate()
    driver.reap(time.monotonic() + 20)
    owed = expectations(first, time.time())
    wait_drained(lambda: judge(cluster, faults, owed, sampler.errors), cluster.revive)
    sampler.done.set()
    sampler.join()
    rows = judge(cluster, faults, owed, sampler.errors)
    skew = Row("clock_skew", injected=len(cluster.skews))
    skew.observed.append(_clock_skew_observed(cluster, sampler.samples))
    return [*rows, skew]


def _clock_skew_observed(cluster: Cluster, samples: int) -> str:
    """Per skewed host: its offset and how its runs started against their due times
    (the early column judges them); how many lease samples found none too long."""
    lines = cluster.ledger_lines()
    seen = []
    for host, skew in sorted(cluster.skews.items()):
        lags = [
            float(x["t"]) - skew - float(x["scheduled_for"])
            for x in lines
            if x.get("host") == host and x["event"] == "start" and x.get("scheduled_for")
        ]
        earliest = f", earliest {min(lags):+.1f} s from due" if lags else ""
        seen.append(f"{host} clock {skew:+.0f} s: {len(lags)} runs started{earliest}")
    return f"{'; '.join(seen)}; {samples} lease samples against the database clock"


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(where)], check=True)


def fill(where: Path) -> Path:
    """Write a file on ``where`` until the filesystem is full; returns it."""
    filler = where / "filler"
    chunk = b"\0" * 65536
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while os.write(fd, chunk):
            pass
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler


def disk_full_phase(run_dir: Path) -> list[Row]:
    """One host, SQLite on an 8 MiB tmpfs and the embedded broker: fill the disk, then free it."""
    home = run_dir / "single"
    home.mkdir()
    with small_tmpfs(home / "disk", "8m") as disk:
        env = workload_env(home, broker_url=None, database_url=f"sqlite:///{disk / 'kernel.db'}")
        env.update(KERNEL_VAR_DIR=str(home / "var"), CHAOS_HOST="single")
        ledger = home / "ledger.jsonl"
        kernel = Kernel.open(env["KERNEL_DATABASE_URL"], migrate_schema=True)
        kernel.apply_jobs([s for s in job_specs(ledger) if s["id"].startswith("tick-")])
        base = [sys.executable, "-m", "celery", "-A", "celery_app"]
        procs = [
            Proc("single-worker", [*base, "worker", "-n", "single@host", "-Q", QUEUE, "-c", "2",
                                   "-l", "INFO", "--without-mingle", "--without-gossip"],
                 cwd=home, env=env),
            Proc("single-beat", [*base, "beat", "-s", str(home / "schedule"), "-l", "INFO"],
                 cwd=home, env=env),
        ]  # fmt: skip
        try:
            first = time.time()
            time.sleep(_DISK_PHASE_S / 3)
            at = time.time()
            print(f"{time.strftime('%H:%M:%S')} disk_full", flush=True)
            filler = fill(disk)
            size = filler.stat().st_size
            time.sleep(_DISK_PHASE_S / 3)
            filler.unlink()
            time.sleep(_DISK_PHASE_S / 3)
            owed = [e for e in expectations(first, time.time()) if e.job_id.startswith("tick-")]
            faults = [
                FaultRecord(
                    "disk_full", at, f"8 MiB tmpfs filled ({size >> 10} KiB), freed 8 s later"
                )
            ]

            def judged() -> list[Row]:
                rows, events = read_kernel(kernel, [e.job_id for e in owed])
                # The full disk must not stop the worker or the Beat (I8: they carry on).
                exits = [
                    (p.log_path.stat().st_mtime, f"{p.name} exit status {p.popen.returncode}")
                    for p in procs
                    if p.popen.poll() is not None
                ]
                evidence = Evidence(
                    read_ledger(ledger), rows, events, faults, owed, time.time(), exits=exits
                )
                return check(evidence)

            wait_drained(judged, lambda: None)
            rows = judged()
        finally:
            kernel.close()
            for proc in procs:
                proc.expected_exit = True
                proc.terminate()
            deadline = time.monotonic() + 20
            for proc in procs:
                proc.reap(deadline)
    rows[0].fault = "sqlite_baseline"
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0, help="length of the whole run")
    parser.add_argument("--spacing", type=float, default=10.0, help="seconds between faults")
    parser.add_argument(
        "--broker",
        choices=("redis", "rabbitmq"),
        default="redis",
        help="the Celery broker on the services host (RabbitMQ: Debian's rabbitmq-server)",
    )
    parser.add_argument(
        "--canvas-every", type=float, default=6.0, help="seconds between canvas firings"
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    parser.add_argument("--verbose", action="store_true", help="print every note")
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="judge a clean made-up run and one mutant per violation; no hosts needed",
    )
    args = parser.parse_args(argv)
    if args.self_test:
        shown, ok = self_test()
        print(shown)
        print("each violation flagged in its own column only" if ok else "FAILED: see WRONG rows")
        return 0 if ok else 1
    run_dir = Path(tempfile.mkdtemp(prefix="kernel-chaos-"))
    seconds = max(args.minutes * 60 - _DISK_PHASE_S - 30, args.spacing * len(FAULTS) + _BASELINE_S)
    try:
        rows = multi_host_phase(seconds, args.spacing, run_dir, args.broker, args.canvas_every)
        rows += disk_full_phase(run_dir)
    except NetworkUnavailable as exc:
        print(f"chaos run not possible here: {exc}", file=sys.stderr)
        return UNAVAILABLE
    bad = failed(rows)
    if args.keep or bad:
        print(f"run directory (logs, ledger): {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    print("FAILED: see the violations below" if bad else "no violation")
    print(report(rows, verbose=args.verbose))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
