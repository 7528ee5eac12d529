"""A multi-host celery-kernel deployment on test hosts: its processes, its jobs, its faults.

The services host runs PostgreSQL (the kernel) and Redis (the broker); each worker host
runs one ``celery worker`` and some run a ``celery beat``, configured only through the
product's environment variables. A host may have a skewed clock: libfaketime (Debian's
``faketime`` package) preloaded into its processes with a fixed offset. The ``faketime``
wrapper itself forks, so the library is preloaded directly to keep the PIDs we signal.
The caller (the harness) runs inside the services namespace, so it reaches both servers.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from integration.stack import ACKS_LATE, Proc, wait_until
from multihost.evidence import (
    Handback,
    KernelEvent,
    KernelRow,
    read_kernel,
    read_ledger,
    stamp_due_times,
)
from multihost.netns import Host, Network
from multihost.services import Postgres, RabbitMQ, Redis

from adapters.base import CHECKPOINT_V1
from kernel import Kernel, KernelError, Occurrence

__all__ = ["Cluster", "HostPlan", "faketime_library", "job_specs", "workload_env"]

MULTIHOST_DIR = Path(__file__).resolve().parent
QUEUE = "chaos"
#: The shortest lease a job may have; faults that outlast it force reclaims.
LEASE_S = 5
#: How long after a host's link heals (or its worker thaws) the pause and warm-shutdown
#: faults leave its runs alone: TCP retransmissions backed off under the fault can keep
#: its lease renewals late for seconds more.
_RECOVERY_S = 10.0
SETTINGS_MODULE = "chaos_settings"
#: The canvas firings' tasks (``chaos_canvas.py``) are the workers' and routed.
_SETTINGS = """\
kernel_rehint_after = 2.0
imports = ["chaos_canvas"]
kernel_route_tasks = ["chaos_canvas.*"]
"""
_READY_TIMEOUT = 60.0


#: What puts a process on a skewed host's clock (see ``Cluster._spawn``).
_SKEWED_CLOCK_ENV = ("LD_PRELOAD", "FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC", "PYTHONPATH")


def faketime_library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


def job_specs(ledger: Path) -> list[dict[str, Any]]:
    """The mixed workload: every-second, long checkpointing, both deliveries, shell and callable.

    Overlap ``allow`` and catch-up ``all`` make every firing owed, so the checker can
    expect each one; plenty of attempts keep repeated kills from exhausting them.
    """

    def job(
        job_id: str, every: str, delivery: str, payload: dict[str, Any], kind: str
    ) -> dict[str, Any]:
        return {
            "id": job_id,
            "kind": kind,
            "queue": QUEUE,
            "schedule": {"every": every},
            "catchup": {"policy": "all", "window": "1h"},
            "overlap": "allow",
            "delivery": delivery,
            "lease": f"{LEASE_S}s",
            "max_attempts": 50,
            "retry": {"backoff": "1s", "factor": 1, "max": "2s", "jitter": 0},
            "payload": payload,
        }

    def callable_payload(function: str, **kwargs: Any) -> dict[str, Any]:
        return {"callable": f"chaos_jobs:{function}", "kwargs": {"ledger": str(ledger), **kwargs}}

    shell = {
        "argv": [sys.executable, str(MULTIHOST_DIR / "chaos_jobs.py"), str(ledger)],
        # The child keeps its host's clock (libfaketime and its settings), as any
        # process on a skewed host would: the checker corrects the host's offset.
        "env_allow": ["CHAOS_HOST", *_SKEWED_CLOCK_ENV],
    }
    steps = {"total": 6, "step_s": 1.0}
    return [
        job("tick-alo", "1s", "at-least-once", callable_payload("tick"), "callable"),
        job("tick-amo", "1s", "at-most-once", callable_payload("tick"), "callable"),
        job("shell-alo", "2s", "at-least-once", shell, "shell"),
        job(
            "long-alo", "10s", "at-least-once", callable_payload("long_steps", **steps), "callable"
        ),
        job("long-amo", "10s", "at-most-once", callable_payload("long_steps", **steps), "callable"),
    ]


def workload_env(run_dir: Path, *, broker_url: str | None, database_url: str) -> dict[str, str]:
    """The environment every worker and Beat gets: the product's variables, nothing else of ours."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_", "KERNEL_", "FAKETIME"))
        and k not in ("PYTHONPATH", "LD_PRELOAD")
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(MULTIHOST_DIR), str(run_dir)]),
        CELERY_CONFIG_MODULE=SETTINGS_MODULE,
        KERNEL_DATABASE_URL=database_url,
        KERNEL_BEAT_INTERVAL="0.5",
    )
    if broker_url:
        env["CELERY_BROKER_URL"] = broker_url
    acks_late = broker_url is not None and broker_url.startswith("amqp")
    (run_dir / f"{SETTINGS_MODULE}.py").write_text(_SETTINGS + (ACKS_LATE if acks_late else ""))
    return env


class HostPlan:
    """What one worker host runs: a worker, maybe a Beat, and its clock offset in seconds."""

    def __init__(self, beat: bool, skew_s: float = 0.0) -> None:
        self.beat = beat
        self.skew_s = skew_s


class Cluster:
    """Services, hosts and their processes; every ``start_*`` can be called again after a kill."""

    def __init__(
        self, network: Network, run_dir: Path, plans: list[HostPlan], broker: str = "redis"
    ) -> None:
        self.network = network
        self.run_dir = run_dir
        self.plans = dict(zip((h.name for h in network.workers), plans, strict=True))
        self.ledger = run_dir / "ledger.jsonl"
        self.postgres = Postgres(network.services)
        self.broker = (
            RabbitMQ(network.services) if broker == "rabbitmq" else Redis(network.services)
        )
        self.procs: list[Proc] = []
        self.workers: dict[str, Proc] = {}
        self.beats: dict[str, Proc] = {}
        self._kernel: Kernel | None = None
        self._generation = 0
        self.env: dict[str, str] = {}
        #: Due time of each occurrence a shell run wrote about (its child is not told it).
        self._due: dict[int, float] = {}
        #: Each pause/resume and warm shutdown, with the runs it was aimed at.
        self.handbacks: list[Handback] = []
        #: (when it exited, which process and its last CRITICAL line) of each worker or
        #: Beat that exited on its own and was started again, as a supervisor would.
        self.exits: list[tuple[float, str]] = []
        #: When each host's link was last healed or its worker thawed (monotonic).
        self._disturbed_until: dict[str, float] = {}

    @property
    def skews(self) -> dict[str, float]:
        return {name: plan.skew_s for name, plan in self.plans.items() if plan.skew_s}

    # -- start and stop ------------------------------------------------------------

    def start(self) -> None:
        """Servers and schema, the workers, the jobs (defined by the harness), then the Beats."""
        self.postgres.start()
        self.postgres.create_database()
        self.broker.start()
        self.env = workload_env(
            self.run_dir, broker_url=self.broker.url, database_url=self.postgres.url
        )
        Kernel.open(self.postgres.url, migrate_schema=True).close()
        for host in self.network.workers:
            self.start_worker(host)
        # Defined just before the Beats start: firings owed from here on are checked.
        self.kernel.apply_jobs(job_specs(self.ledger))
        for host in self.network.workers:
            if self.plans[host.name].beat:
                self.start_beat(host)

    def revive(self) -> None:
        """Start a worker or Beat again wherever one exited unbidden; record why."""
        for started, start in ((self.workers, self.start_worker), (self.beats, self.start_beat)):
            for name, proc in list(started.items()):
                if proc.expected_exit or proc.popen.poll() is None:
                    continue
                critical = [line for line in proc.log().splitlines() if "CRITICAL/" in line]
                # The cause is Celery's "Unrecoverable error" line; the CRITICAL lines after
                # it (acks refused on the closed connection) are what the stop went through.
                cause = [line for line in critical if "Unrecoverable error" in line]
                why = (cause or critical[-1:] or [f"exit status {proc.popen.returncode}"])[0]
                # Its log's last write (the filesystem's clock, never skewed) is when it
                # went, which may be a fault or two before this look found it.
                went = proc.log_path.stat().st_mtime
                self.exits.append((went, f"{proc.name}: {why}"[:300]))
                proc.expected_exit = True
                start(self.host(name))

    def host(self, name: str) -> Host:
        return next(h for h in self.network.workers if h.name == name)

    def _spawn(self, host: Host, role: str, args: list[str]) -> Proc:
        self._generation += 1
        env = dict(self.env, CHAOS_HOST=host.name)
        skew = self.plans[host.name].skew_s
        library = faketime_library()
        if skew:
            assert library is not None, "faketime is not installed"
            env.update(
                LD_PRELOAD=library,
                FAKETIME=f"{skew:+.0f}s",
                # Only the wall clock is skewed; monotonic time is the host's own.
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                # A time.sleep that libfaketime does not break (see skewed/sitecustomize.py).
                PYTHONPATH=os.pathsep.join([str(MULTIHOST_DIR / "skewed"), env["PYTHONPATH"]]),
            )
        name = f"{role}-{host.name}-{self._generation}"
        argv = host.argv([sys.executable, "-m", "celery", "-A", "celery_app", *args])
        proc = Proc(name, argv, cwd=self.run_dir, env=env)
        self.procs.append(proc)
        return proc

    def start_worker(self, host: Host) -> Proc:
        node = f"w-{host.name}-{self._generation + 1}@{host.name}"
        proc = self._spawn(
            host,
            "worker",
            ["worker", "-n", node, "-Q", QUEUE, "-c", "3", "-l", "INFO",
             "--without-mingle", "--without-gossip"],
        )  # fmt: skip
        ready = re.compile(rf"{re.escape(node)} ready\.")
        self._wait_for(proc, lambda: ready.search(proc.log()), f"{proc.name} ready")
        self.workers[host.name] = proc
        return proc

    def start_beat(self, host: Host) -> Proc:
        proc = self._spawn(
            host, "beat", ["beat", "-s", str(self.run_dir / f"{host.name}-schedule"), "-l", "INFO"]
        )
        marker = f":{proc.pid}:"
        self._wait_for(
            proc,
            lambda: any(marker in beat.id for beat in self.kernel.beats()),
            f"{proc.name} heartbeat",
        )
        self.beats[host.name] = proc
        return proc

    def _wait_for(self, proc: Proc, check: Callable[[], Any], what: str) -> None:
        def alive() -> Any:
            if proc.popen.poll() is not None:
                raise AssertionError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
            return check()

        wait_until(alive, timeout=_READY_TIMEOUT, what=what, interval=0.2)

    def stop(self) -> None:
        """SIGTERM every process (waking frozen ones), reap them, stop and remove the servers."""
        for proc in self.procs:
            proc.expected_exit = True
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline = time.monotonic() + 20
        for proc in self.procs:
            proc.reap(deadline)
        if self._kernel is not None:
            self._kernel.close()
        self.broker.remove()
        self.postgres.remove()

    # -- what the harness reads ------------------------------------------------------------

    @property
    def kernel(self) -> Kernel:
        if self._kernel is None:
            self._kernel = Kernel.open(self.postgres.url)
        return self._kernel

    def ledger_lines(self) -> list[dict[str, Any]]:
        """The ledger, each shell run's lines given their occurrence's due time."""
        lines = read_ledger(self.ledger)
        for line in lines:
            occurrence_id = line.get("occurrence_id")
            if line.get("scheduled_for") is None and occurrence_id is not None:
                if occurrence_id not in self._due:
                    occurrence = self.kernel.get_occurrence(occurrence_id)
                    self._due[occurrence_id] = occurrence.scheduled_for.timestamp()
                line["scheduled_for"] = self._due[occurrence_id]
        return lines

    def kernel_state(self) -> tuple[list[dict[str, Any]], list[KernelRow], list[KernelEvent]]:
        """The ledger, and the workload's occurrences and their events as the kernel keeps them."""
        rows, events = read_kernel(self.kernel, [spec["id"] for spec in job_specs(self.ledger)])
        lines = read_ledger(self.ledger)
        stamp_due_times(lines, rows)
        return lines, rows, events

    def lease_overreach(self, kernel: Kernel) -> list[str]:
        """Running occurrences whose lease ends later than the database clock allows.

        A host that computed lease expiry from its own (skewed) clock would show here.
        ``kernel`` is the caller's own (a sampling thread must not share the harness's).
        """
        try:
            now = kernel.now()
            running = kernel.list_occurrences(statuses=["running"], limit=1000)
        except KernelError:
            return []  # the database is down for a fault; nothing to sample
        slack = LEASE_S + 1.0
        return [
            f"occurrence {o.id} lease ends {(o.lease_expires_at - now).total_seconds():.0f}s ahead"
            for o in running
            if o.lease_expires_at is not None and (o.lease_expires_at - now).total_seconds() > slack
        ]

    # -- faults --------------------------------------------------------------------------

    def busy_host(self, candidates: list[str]) -> Host:
        """The candidate host whose worker started a long job most recently, else the first.

        Faults aimed there hit a run in the middle of its lease, which is what they test.
        """
        for line in reversed(self.ledger_lines()[-200:]):
            job = str(line.get("job_id"))
            long_start = line.get("event") == "start" and job.startswith("long-")
            if long_start and line.get("host") in candidates:
                return self.host(line["host"])
        return self.host(candidates[0])

    def kill_worker_main(self, host: Host) -> str:
        """SIGKILL the worker's main process only; start a new worker on the host."""
        proc = self.workers[host.name]
        proc.expected_exit = True
        os.kill(proc.pid, signal.SIGKILL)
        proc.popen.wait()
        self.start_worker(host)
        return f"kill -9 {proc.name} main process"

    def kill_pool_child(self, host: Host) -> str:
        """SIGKILL one pool child, preferring one that is running a job; Celery replaces it."""
        proc = self.workers[host.name]
        children = proc.children()
        busy = [line["pid"] for line in self.ledger_lines()[-50:] if line.get("pid") in children]
        os.kill(busy[-1] if busy else children[0], signal.SIGKILL)
        return f"kill -9 {'busy' if busy else 'idle'} pool child of {proc.name}"

    def kill_beat(self, host: Host) -> str:
        """SIGKILL a Beat; start it again a moment later."""
        proc = self.beats[host.name]
        proc.crash()
        proc.popen.wait()
        time.sleep(1.0)
        self.start_beat(host)
        return f"kill -9 {proc.name}, restarted 1 s later"

    def freeze_worker(self, host: Host, seconds: float) -> str:
        """SIGSTOP the worker (its main and pool processes) for ``seconds``, past its
        lease, then SIGCONT. A shell job's supervisor runs in a session of its own and
        is not the worker: left running, it must stop the job at its deadline. (Freezing
        it too would freeze the job with it, and on SIGCONT the job could write before
        its supervisor kills it: a paused host, which no process on it can fence.)"""
        proc = self.workers[host.name]
        session = _session(proc.pid)
        worker = [pid for pid in (proc.pid, *proc.children()) if _session(pid) == session]
        for sig in (signal.SIGSTOP, signal.SIGCONT):
            for pid in worker:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if sig == signal.SIGSTOP:
                time.sleep(seconds)
        self._disturbed(host)
        return f"SIGSTOP {proc.name} {seconds:.0f} s > lease {LEASE_S} s"

    def restart_postgres(self, mode: str) -> str:
        """``pg_ctl stop -m immediate|fast``, then start the same cluster again."""
        down = time.monotonic()
        self.postgres.pg_ctl_stop(mode)
        time.sleep(1.0)
        self.postgres.start()
        return f"pg_ctl stop -m {mode}, PostgreSQL down {time.monotonic() - down:.1f} s"

    def partition(self, host: Host, seconds: float) -> str:
        """Take ``host``'s link down for ``seconds``, then heal it."""
        self.network.partition(host)
        try:
            time.sleep(seconds)
        finally:
            self.network.heal(host)
            self._disturbed(host)
        return f"{host.name} link down {seconds:.0f} s > lease {LEASE_S} s"

    def lossy_link(self, host: Host, percent: int, seconds: float) -> str:
        """Drop ``percent`` % of ``host``'s packets both ways for ``seconds``."""
        self.network.drop_packets(host, percent)
        try:
            time.sleep(seconds)
        finally:
            self.network.stop_dropping(host)
            self._disturbed(host)
        return f"{host.name} link drops {percent} % for {seconds:.0f} s"

    def slow_link(self, host: Host, rate: str, seconds: float) -> str:
        """Throttle ``host``'s link to ``rate`` for ``seconds``: its packets queue, some drop."""
        self.network.throttle(host, rate)
        try:
            time.sleep(seconds)
        finally:
            self.network.stop_throttling(host)
            self._disturbed(host)
        return f"{host.name} link throttled to {rate} for {seconds:.0f} s"

    def _disturbed(self, host: Host) -> None:
        self._disturbed_until[host.name] = time.monotonic() + _RECOVERY_S

    def _undisturbed_pids(self) -> set[int]:
        """The worker processes on hosts no fault touched in the last ``_RECOVERY_S``."""
        now = time.monotonic()
        return {
            pid
            for name, proc in self.workers.items()
            if self._disturbed_until.get(name, 0.0) <= now
            for pid in (proc.pid, *proc.children())
        }

    def _running_long(self) -> list[Occurrence]:
        running = self.kernel.list_occurrences(statuses=["running"], limit=1000)
        return [o for o in running if o.job_id.startswith("long-")]

    def pause_and_resume(self, paused_s: float) -> str:
        """An operator pauses a running checkpointing occurrence and resumes it ``paused_s`` later.

        Through the kernel's Python API, which ``kernel pause`` / ``kernel resume`` call:
        on this loaded machine the CLI takes longer to start than a run lasts. The
        pause is recorded for the checker as soon as the kernel accepts it (a run that
        does not hand back is a violation); one that found no run to pause is too.
        """
        refused: list[str] = []
        for _ in range(3):
            # The pause reaches the run with its next renewal (up to 2 s): pick one that
            # has steps left, waiting a little for one to start if need be.
            with contextlib.suppress(AssertionError):
                target = wait_until(
                    self._fresh_long_run, timeout=12.0, what="a fresh run", interval=0.5
                )
                try:
                    self.kernel.request_pause(
                        target.id,
                        request_id=uuid.uuid4().hex,
                        safe_points=CHECKPOINT_V1.safe_points,
                        operator="chaos-operator",
                    )
                except KernelError as exc:  # it finished meanwhile
                    refused.append(f"{target.id}: {exc.code}")
                    continue
                self.handbacks.append(Handback("pause", time.time(), (target.id,)))

                def paused(occurrence_id: int = target.id) -> bool:
                    control = self.kernel.get_occurrence(occurrence_id).control
                    return control is not None and control.state.value == "paused"

                try:
                    wait_until(paused, timeout=LEASE_S + 3, what="the pause", interval=0.2)
                except AssertionError:
                    return f"pause of occurrence {target.id} requested; it did not pause"
                time.sleep(paused_s)
                self.kernel.resume(
                    target.id, request_id=uuid.uuid4().hex, operator="chaos-operator"
                )
                return f"pause occurrence {target.id}, resume {paused_s:.0f} s after it paused"
        self.handbacks.append(Handback("pause", time.time(), ()))
        return f"no run to pause (refused: {', '.join(refused) or 'none running'})"

    def _fresh_long_runs(self) -> list[Occurrence]:
        """Live checkpointing runs that have done at most 2 of their 6 steps, oldest first,
        held on a host no fault touched lately (lease live: a run whose worker is gone
        cannot be paused or handed back; one whose link is still recovering may lose its
        lease before it reaches a safe point, which tests the lease, not the pause)."""
        now = self.kernel.now()
        healthy = self._undisturbed_pids()
        running = {
            o.id: o
            for o in self._running_long()
            if o.lease_expires_at is not None
            and o.lease_expires_at > now
            and o.lease_owner is not None
            and int(o.lease_owner.split(":")[1]) in healthy
        }
        steps: dict[int, int] = {}
        for line in self.ledger_lines()[-300:]:
            if line.get("occurrence_id") in running and line["event"] in ("start", "step"):
                steps[line["occurrence_id"]] = line.get("step", -1) + 1
        return [running[i] for i, done in steps.items() if done <= 2]

    def _fresh_long_run(self) -> Occurrence | None:
        fresh = self._fresh_long_runs()
        return fresh[-1] if fresh else None

    def warm_shutdown(self, candidates: list[str]) -> str:
        """SIGTERM a worker running a checkpointing run (waiting up to 12 s for one): its
        runs hand back; start a new worker there. Recorded for the checker with the runs
        it held; one that held none is recorded too (it tested nothing)."""

        def holding() -> tuple[Host, list[Occurrence]] | None:
            for name in candidates:
                proc = self.workers[name]
                pids = {proc.pid, *proc.children()}
                held = [
                    o
                    for o in self._fresh_long_runs()
                    if o.lease_owner is not None and int(o.lease_owner.split(":")[1]) in pids
                ]
                if held:
                    return self.host(name), held
            return None

        try:
            host, handing = wait_until(holding, timeout=12.0, what="a busy worker", interval=0.5)
        except AssertionError:
            host, handing = self.host(candidates[0]), []
        proc = self.workers[host.name]
        proc.expected_exit = True
        self.handbacks.append(Handback("warm", time.time(), tuple(o.id for o in handing)))
        proc.popen.terminate()
        proc.popen.wait(60)
        self.start_worker(host)
        return f"SIGTERM {proc.name} holding {len(handing)} checkpointing run(s)"


def _session(pid: int) -> int | None:
    """The session ``pid`` belongs to, or None once it is gone."""
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None
