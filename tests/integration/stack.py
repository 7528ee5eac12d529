"""Real ``celery worker`` and ``celery beat`` processes around one test's tmp dir.

A :class:`Stack` is one test's world: its own working directory (so ``./var`` —
the embedded broker's folders and the default SQLite kernel — is new), an
environment naming the broker and the kernel database, a ledger file the jobs in
``ledger_jobs.py`` append to, a settings module named by ``CELERY_CONFIG_MODULE``,
and a queue of its own so tests sharing the session's Redis never see each
other's messages. Processes run in a session of their own with their output in a
log file, and are stopped by PID: SIGTERM, then SIGKILL for whatever is left of
their process tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from process_stacks import python_stacks

from kernel import Kernel, Occurrence, SchemaUnknown, StorageUnavailable

__all__ = ["LOG_TAIL", "Proc", "Stack", "ended", "proc_stat", "wait_until"]

T = TypeVar("T")

INTEGRATION_DIR = Path(__file__).resolve().parent
#: The ``CELERY_CONFIG_MODULE`` each stack writes into its working directory. Re-hinting
#: after 1 s (default 30 s) makes a reclaim after a short lease, or a refill after a
#: purge, cost seconds.
SETTINGS_MODULE = "kernel_it_settings"
_SETTINGS = "kernel_rehint_after = 1.0\n"
#: How RabbitMQ users run Celery: a message is acknowledged when its task ends, and
#: given back if its worker process dies (queues are durable by kombu's default).
ACKS_LATE = "task_acks_late = True\ntask_reject_on_worker_lost = True\n"
_TERMINAL = frozenset({"succeeded", "dead_letter", "cancelled", "skipped", "needs_adjudication"})
_READY_TIMEOUT = 30.0
#: Above billiard's own bound on a stop: a pool process whose taken job its pool's
#: shutdown flush discarded (the "taken" ack still unread) waits up to 30 s for its
#: result to be read before it exits (Celery's prefork pool, not ours; the worker still
#: exits). A process that outlasts this is hung.
_STOP_GRACE = 40.0
#: Lines of each process log attached to a failed test's report.
LOG_TAIL = 60


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name; None for a gone or zombie process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie its parent has not reaped)."""
    return proc_stat(pid) is None


def wait_until(
    check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.1
) -> T:
    """Poll ``check`` until it returns something truthy, and return that.

    A kernel not migrated yet or briefly unavailable counts as "not yet".

    Raises:
        AssertionError: ``timeout`` seconds passed; the message says ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (SchemaUnknown, StorageUnavailable):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Proc:
    """A worker or Beat process this fixture started, in a session of its own."""

    def __init__(self, name: str, argv: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self.expected_exit = False
        #: Where the process was when :meth:`reap` had to kill it (its stacks), or None.
        self.hang: str | None = None
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logged(self, text: str) -> bool:
        return text in self.log()

    def tail(self, lines: int = LOG_TAIL) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def children(self, pid: int | None = None) -> list[int]:
        """Every descendant of ``pid`` (default: this process), from ``/proc/*/task/*/children``."""
        found: list[int] = []
        for task in Path(f"/proc/{pid or self.pid}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue  # the thread or the process ended while we looked
            for kid in kids:
                found += [kid, *self.children(kid)]
        return found

    def signal_tree(self, sig: signal.Signals) -> list[int]:
        """Send ``sig`` to this process and all of its descendants; returns the PIDs signalled."""
        pids = [self.pid, *self.children()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is this process or one of its descendants."""
        return pid == self.pid or pid in self.children()

    def crash(self) -> list[int]:
        """SIGKILL the whole tree at once, as a host failure would; returns the PIDs killed."""
        self.expected_exit = True
        return self.signal_tree(signal.SIGKILL)

    def terminate(self) -> None:
        """Ask for a clean stop: wake a frozen tree, then SIGTERM the main process."""
        if self.popen.poll() is None:
            self.signal_tree(signal.SIGCONT)
            self.popen.terminate()

    def stacks(self) -> str:
        """The Python stacks of this process and its descendants, with their locals: where a
        process that would not stop was."""
        return python_stacks([self.pid, *self.children()])

    def reap(self, deadline: float) -> bool:
        """Wait for the main process until ``deadline``, then SIGKILL what is left (its
        stacks kept in :attr:`hang` first).

        Returns:
            True when the main process had to be killed.
        """
        try:
            self.popen.wait(max(0.0, deadline - time.monotonic()))
            killed = False
        except subprocess.TimeoutExpired:
            self.hang = self.stacks()
            self.popen.kill()
            self.popen.wait()
            killed = True
        # Pool children outlive a killed parent; they are still in the session we created.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        return killed


class Stack:
    """One test's world: tmp working directory, environment, kernel, processes and ledger."""

    def __init__(self, root: Path, *, broker_url: str | None, database_url: str | None) -> None:
        self.root = root
        self.queue = f"it-{uuid.uuid4().hex[:10]}"
        self.ledger_path = root / "ledger.jsonl"
        self.database_url = database_url or f"sqlite:///{root / 'var' / 'kernel.db'}"
        self.procs: list[Proc] = []
        self._kernel: Kernel | None = None
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CELERY_", "KERNEL_")) and k != "PYTHONPATH"
        }
        env.update(
            PYTHONPATH=os.pathsep.join([str(INTEGRATION_DIR), str(root)]),
            CELERY_CONFIG_MODULE=SETTINGS_MODULE,
            KERNEL_BEAT_INTERVAL="0.2",
        )
        if broker_url:
            env["CELERY_BROKER_URL"] = broker_url
        if database_url:  # else the product's default: ./var/kernel.db in the working directory
            env["KERNEL_DATABASE_URL"] = database_url
        self.env = env
        acks_late = broker_url is not None and broker_url.startswith("amqp")
        (root / f"{SETTINGS_MODULE}.py").write_text(_SETTINGS + (ACKS_LATE if acks_late else ""))

    # -- set-up ----------------------------------------------------------------

    def job(
        self,
        job_id: str,
        function: str,
        *,
        kwargs: dict[str, Any] | None = None,
        schedule: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """A ``callable`` job running ``ledger_jobs:<function>`` on this stack's queue."""
        return {
            "id": job_id,
            "kind": "callable",
            "queue": self.queue,
            "schedule": schedule,
            "payload": {
                "callable": f"ledger_jobs:{function}",
                "kwargs": {"ledger": str(self.ledger_path), **(kwargs or {})},
            },
            **fields,
        }

    def use_jobs(self, *specs: dict[str, Any]) -> None:
        """Write a job file and point ``KERNEL_JOBS_FILE`` at it (Beat applies it at start)."""
        path = self.root / "jobs.json"
        path.write_text(json.dumps({"jobs": list(specs)}, indent=2))
        self.env["KERNEL_JOBS_FILE"] = str(path)

    def define(self, *specs: dict[str, Any]) -> None:
        """Apply job specs straight to the kernel (for tests that run no Beat)."""
        for spec in specs:
            self.kernel.apply_job(spec)

    # -- processes -----------------------------------------------------------------

    def _start(self, name: str, *args: str) -> Proc:
        if any(proc.name == name for proc in self.procs):
            raise ValueError(f"a process named {name!r} was already started")
        proc = Proc(
            name,
            [sys.executable, "-m", "celery", "-A", "celery_app", *args],
            cwd=self.root,
            env=self.env,
        )
        self.procs.append(proc)
        return proc

    def start_worker(
        self, name: str, *, concurrency: int | None = 1, pool: str = "prefork"
    ) -> Proc:
        """Start ``celery worker`` consuming this stack's queue and wait until it is ready;
        ``concurrency`` None: no ``-c``, the pool sized by the settings or the default."""
        node = f"{name}-{self.queue}"
        proc = self._start(
            name,
            "worker",
            "-P",
            pool,
            "-n",
            f"{node}@%h",
            "-Q",
            self.queue,
            *(() if concurrency is None else ("-c", str(concurrency))),
            "-l",
            "INFO",
            "--without-mingle",
            "--without-gossip",
        )
        ready = re.compile(rf"{re.escape(node)}@\S+ ready\.")
        self.wait(
            lambda: ready.search(proc.log()), timeout=_READY_TIMEOUT, what=f"worker {name} ready"
        )
        return proc

    def start_beat(self, name: str) -> Proc:
        """Start ``celery beat`` and wait for its first heartbeat in the kernel."""
        proc = self._start(name, "beat", "-s", str(self.root / f"{name}-schedule"), "-l", "INFO")
        marker = f":{proc.pid}:"
        self.wait(
            lambda: any(marker in beat.id for beat in self.kernel.beats()),
            timeout=_READY_TIMEOUT,
            what=f"beat {name} heartbeat",
        )
        return proc

    def wait(self, check: Callable[[], T | None], *, timeout: float, what: str) -> T:
        """:func:`wait_until`, failing at once if a process this stack runs has died."""

        def alive_check() -> T | None:
            for proc in self.procs:
                if not proc.expected_exit and proc.popen.poll() is not None:
                    raise AssertionError(
                        f"{proc.name} exited with {proc.popen.returncode} "
                        f"while waiting for {what}:\n{proc.tail()}"
                    )
            return check()

        return wait_until(alive_check, timeout=timeout, what=what)

    def stop_all(self) -> None:
        """Stop every process at once (their warm shutdowns overlap), then reap them.

        Raises:
            AssertionError: a process ignored SIGTERM for the whole grace period (it
                was killed): a worker or Beat that cannot be stopped is a bug.
        """
        for proc in self.procs:
            proc.expected_exit = True
            proc.terminate()
        deadline = time.monotonic() + _STOP_GRACE
        hung = [proc.name for proc in self.procs if proc.reap(deadline)]
        assert not hung, (
            f"{hung} did not stop within {_STOP_GRACE:.0f}s of SIGTERM "
            "(where each was: its 'stacks when it was killed' section)"
        )

    def send_hints(self, *occurrence_ids: int, copies: int = 1) -> None:
        """Publish ``copies`` ``kernel.run_occurrence`` hints through the product's own app,
        each carrying ``occurrence_ids`` (several: one batch, as the pump sends a backlog)."""
        code = (
            "import sys\n"
            "from celery_app import app\n"
            "queue, copies = sys.argv[1], int(sys.argv[2])\n"
            "ids = [int(i) for i in sys.argv[3:]]\n"
            "with app.producer_or_acquire() as producer:\n"
            "    for _ in range(copies):\n"
            "        app.send_task('kernel.run_occurrence', args=ids, queue=queue,\n"
            "                      producer=producer)\n"
        )
        subprocess.run(
            [sys.executable, "-c", code, self.queue, str(copies), *map(str, occurrence_ids)],
            cwd=self.root,
            env=self.env,
            check=True,
            timeout=60,
            capture_output=True,
        )

    def cli(self, *args: str) -> Any:
        """Run ``celery -A celery_app kernel <args> --json`` as an operator would; its JSON."""
        done = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "celery_app", "kernel", *args, "--json"],
            cwd=self.root,
            env=self.env,
            timeout=60,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (
            f"kernel {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        )
        return json.loads(done.stdout)

    # -- the kernel and the ledger -------------------------------------------------------

    @property
    def kernel(self) -> Kernel:
        """The stack's kernel, opened by the test process (SchemaUnknown before migration)."""
        if self._kernel is None:
            kernel = Kernel.open(self.database_url)
            self._kernel = kernel
        return self._kernel

    def run_now(self, job_id: str, *, force: bool = True) -> int:
        """Create a manual occurrence of ``job_id``; returns its id. Forced by default:
        the tests arrange occurrences beside active ones (admission has its own tests)."""
        return self.kernel.run_now(
            job_id, request_id=uuid.uuid4().hex, operator="integration-test", force=force
        ).occurrence.id

    def occurrence(self, occurrence_id: int) -> Occurrence:
        return self.kernel.get_occurrence(occurrence_id)

    def occurrences(self, job_id: str) -> list[Occurrence]:
        """All occurrences of ``job_id``, oldest first."""
        return sorted(self.kernel.list_occurrences(job_id=job_id, limit=1000), key=lambda o: o.id)

    def settled(self, job_id: str, *, but: frozenset[str] = frozenset()) -> bool:
        """Every occurrence of ``job_id`` has reached a terminal status (or one of ``but``)."""
        return all(o.status.value in _TERMINAL | but for o in self.occurrences(job_id))

    def event_types(self, occurrence_id: int) -> list[tuple[str, int | None]]:
        """(type, fence) of every event of one occurrence, in order."""
        return [
            (e.type, e.fence) for e in self.kernel.events(occurrence_id=occurrence_id, limit=1000)
        ]

    def ledger(self, **match: Any) -> list[dict[str, Any]]:
        """Ledger lines (oldest first) whose fields equal ``match``."""
        if not self.ledger_path.exists():
            return []
        lines = [json.loads(line) for line in self.ledger_path.read_text().splitlines()]
        return [line for line in lines if all(line.get(k) == v for k, v in match.items())]

    def close(self) -> None:
        try:
            self.stop_all()
        finally:
            if self._kernel is not None:
                self._kernel.close()
