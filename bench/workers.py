"""The real ``celery worker`` processes the benchmarks start, and plain Celery tasks through them.

``end_to_end.py`` and ``peers.py`` share these: a worker in a session of its own,
stopped by PID; publishing on one producer; polling for completion; and a side that
drains ``n`` no-op tasks (``bench/counter.py``) timed until their Redis counter is full.
Each worker gets its own Redis database as its broker, so several can run side by
side on one server without taking each other's messages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from bench.support import CpuMeter, RssSampler

__all__ = [
    "ROOT",
    "CeleryTasks",
    "Worker",
    "broker_db",
    "publish",
    "timeout_for",
    "wait_until",
    "worker_env",
]

ROOT = Path(__file__).resolve().parents[1]
# Completion is polled; the same interval on every side keeps the bias equal and small.
POLL_S = 0.02
_STOP_GRACE_S = 20.0
_LOG_TAIL_LINES = 40


class Worker:
    """``celery -A APP worker -P prefork -c N [extra]`` in a session of its own, stopped by PID."""

    def __init__(
        self,
        workdir: Path,
        env: dict[str, str],
        concurrency: int,
        app: str = "celery_app",
        extra: Sequence[str] = (),
        command: str = "worker",
    ) -> None:
        self.log_path = workdir / f"{command}-{uuid.uuid4().hex[:8]}.log"
        if command == "worker":
            name = f"bench-{uuid.uuid4().hex[:8]}@%h"
            args = ["-P", "prefork", "-c", str(concurrency), "-n", name, *extra]
        else:
            args = list(extra)
        argv = [sys.executable, "-m", "celery", "-A", app, command, *args]
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise RuntimeError(f"the worker exited with {self.popen.returncode}:\n{self.tail()}")

    def tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    def stop(self) -> None:
        """SIGTERM (warm shutdown), then SIGKILL whatever is left of the session we created."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)


def broker_db(broker_url: str, db: int) -> str:
    """``redis://host:port/DB``: the same server, another database."""
    return f"{broker_url.rsplit('/', 1)[0]}/{db}"


def worker_env(workdir: Path, broker_url: str, **extra: str) -> dict[str, str]:
    """Our environment without Celery/kernel settings, plus the broker and ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_", "KERNEL_", "BENCH_")) and k != "PYTHONPATH"
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(workdir)]),
        CELERY_BROKER_URL=broker_url,
        **extra,
    )
    return env


def publish(app: Any, task: str, args: Sequence[list[Any]], shadow: str | None = None) -> float:
    """Send one message per ``args`` item on one producer; returns when the first went out."""
    started = 0.0
    with app.producer_or_acquire() as producer:
        for i, item in enumerate(args):
            if i == 0:
                started = time.monotonic()
            app.send_task(task, args=item, shadow=shadow, producer=producer)
    return started


def wait_until(
    done: Callable[[], bool],
    alive: Callable[[], None],
    timeout: float,
    what: str,
    detail: Callable[[], str] = str,
) -> float:
    """Poll ``done`` every POLL_S (``alive`` raises if a process died); the time it first held."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; {detail()}")
        alive()
        time.sleep(POLL_S)
    return time.monotonic()


def timeout_for(n: int) -> float:
    return 60.0 + n / 20  # 20/s is far below any system's worst rate


class CeleryTasks:
    """``n`` no-op tasks named ``task`` through ``worker``, timed until their counter is full.

    ``publisher`` is the app that sends them (the worker's own settings, or a stock
    app's); ``broker_url`` is the worker's broker, where the body counts; ``body_args``
    follow the counter's key in each message (``sleep_ms``).
    """

    def __init__(
        self,
        worker: Worker,
        publisher: Celery,
        broker_url: str,
        task: str,
        body_args: Sequence[Any] = (),
    ) -> None:
        self.worker = worker
        self.publisher = publisher
        self.task = task
        self.body_args = list(body_args)
        self.broker = redis.Redis.from_url(broker_url)
        self.rss_mb = self.pss_mb = 0.0
        self.cpu: CpuMeter | None = None  # the last run's

    def run(self, n: int) -> float:
        """Seconds from the first publish until ``n`` bodies ran; the worker's peak RSS, PSS and
        the run's CPU (``self.cpu``) kept."""
        key = f"bench:{self.task}:{uuid.uuid4().hex}"
        cpu = self.cpu = CpuMeter(self.worker.pid)
        with RssSampler([self.worker.pid]) as rss, cpu:
            started = publish(self.publisher, self.task, [[key, *self.body_args]] * n)
            ended = wait_until(
                lambda: int(self.broker.get(key) or 0) >= n,
                self.worker.check_alive,
                timeout_for(n),
                f"{n} {self.task} tasks",
            )
        self.rss_mb = max(self.rss_mb, rss.peak_mb)
        self.pss_mb = max(self.pss_mb, rss.peak_pss_mb)
        return ended - started

    def close(self) -> None:
        self.broker.close()
