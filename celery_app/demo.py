"""The embedded demo: a real worker and Beat on SQLite and the filesystem broker, for a minute.

    python -m celery_app.demo [--seconds 25]

It applies ``examples/jobs.yaml``, starts ``celery -A celery_app worker`` and
``celery -A celery_app beat`` as child processes, prints the kernel's event log
as it grows, pauses and resumes a checkpointing job half-way through, stops both
processes with SIGTERM and prints what ran, then the commands that inspect its
kernel. Everything lives in ``./var/demo`` (not the default ``./var``). Ctrl-C stops
both processes too, and exits 130.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from adapters.base import CHECKPOINT_V1, ExecutionContext
from celery_app.settings import INTERRUPTED_EXIT
from celery_app.shell import celery_command
from kernel import Event, EventCursor, KernelError

__all__ = ["heartbeat", "count_slowly", "main"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "jobs.yaml"
_STOP_GRACE_S = 20.0


def heartbeat(ctx: ExecutionContext) -> str:
    """A job that only says when it ran."""
    return f"beat at {ctx.occurrence.scheduled_for:%H:%M:%S} (attempt {ctx.occurrence.attempt})"


def count_slowly(ctx: ExecutionContext, to: int, step_seconds: float) -> dict[str, Any]:
    """Count to ``to``, checkpointing each step, so a pause and resume redoes no work."""
    start = (ctx.resumed or {}).get("done", 0)
    for done in range(start, to):
        time.sleep(step_seconds)
        ctx.checkpoint({"done": done + 1})
    return {"counted_to": to, "resumed_from": start}


def _say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def _start(name: str, args: list[str], env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    log = (logs / f"{name}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", *args], env=env, stdout=log, stderr=log
    )
    _say(f"started {name} (pid {process.pid}): celery {' '.join(args)} (log: {log.name})")
    return process


def _stop(process: subprocess.Popen[bytes], name: str) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _say(f"{name} did not stop within {_STOP_GRACE_S:.0f}s of SIGTERM; killing it")
            process.kill()
            process.wait()
    _say(f"{name} stopped (exit {process.returncode})")


def _describe(event: Event) -> str:
    parts = [f"event {event.type:<30}", f"job={event.job_id}"]
    if event.occurrence_id is not None:
        parts.append(f"occurrence={event.occurrence_id}")
    if event.fence is not None:
        parts.append(f"fence={event.fence}")
    parts += [
        f"{key}={event.data[key]}"
        for key in ("trigger_key", "reason", "safe_point")
        if event.data.get(key) is not None
    ]
    return " ".join(parts)


def _inspect_commands(database_url: str) -> list[str]:
    prefix = f"KERNEL_DATABASE_URL={shlex.quote(database_url)} {celery_command(None, 'kernel')}"
    return [
        f"{prefix} status",
        f"{prefix} occurrences list",
        f"{prefix} events --limit 50",
    ]


class _CtrlC:
    """Set by Ctrl-C's handler. The demo stops at its next wait rather than where the
    signal lands: inside a database call, SQLAlchemy would log the interrupt's traceback.
    A plain flag, not a ``threading.Event``: its ``set()`` in the handler could wait for
    ever on the lock the interrupted ``wait()`` of the same thread held."""

    pressed = False


def _pause(seconds: float) -> None:
    """Wait ``seconds``; raises KeyboardInterrupt once Ctrl-C was pressed."""
    end = time.monotonic() + seconds
    while not _CtrlC.pressed and (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))
    if _CtrlC.pressed:
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="how long to run (default 25)")
    options = parser.parse_args(argv)
    children: list[tuple[subprocess.Popen[bytes], str]] = []
    _CtrlC.pressed = False
    signal.signal(signal.SIGINT, lambda *_: setattr(_CtrlC, "pressed", True))
    try:
        return _run(options.seconds, children)
    except KeyboardInterrupt:
        _say("interrupted: stopping the worker and Beat")
        return INTERRUPTED_EXIT
    except KernelError as exc:
        _say(f"Error {exc.code}: {exc.message}")
        return 1
    except OSError as exc:
        _say(f"cannot prepare the demo's files: {exc.strerror or exc} ({exc.filename})")
        return 1
    finally:
        _stop_all(children)


def _stop_all(children: list[tuple[subprocess.Popen[bytes], str]]) -> None:
    """Stop Beat, then the worker; a second Ctrl-C must not leave either running."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        while children:
            _stop(*children.pop())
    finally:
        signal.signal(signal.SIGINT, previous)


def _run(seconds: float, children: list[tuple[subprocess.Popen[bytes], str]]) -> int:
    var = Path("var/demo").resolve()
    shutil.rmtree(var, ignore_errors=True)
    var.mkdir(parents=True)
    env = {
        **os.environ,
        "KERNEL_VAR_DIR": str(var),
        "KERNEL_DATABASE_URL": f"sqlite:///{var / 'kernel.db'}",
        "KERNEL_JOBS_FILE": str(EXAMPLES),
        "KERNEL_BEAT_INTERVAL": "0.5",
    }
    env.pop("CELERY_BROKER_URL", None)
    os.environ.update({k: env[k] for k in ("KERNEL_VAR_DIR", "KERNEL_DATABASE_URL")})

    from kernel import Kernel  # after the environment names the demo's files

    kernel = Kernel.open(env["KERNEL_DATABASE_URL"], migrate_schema=True)
    _say(
        f"kernel: {env['KERNEL_DATABASE_URL']} (the demo's own, not the default ./var/kernel.db); "
        f"broker: filesystem:// under {var / 'broker'}"
    )
    for name, args in (
        ("worker", ["-A", "celery_app", "worker", "-c", "2", "-n", "demo@%h", "--loglevel=INFO"]),
        ("beat", ["-A", "celery_app", "beat", "--loglevel=INFO", "-s", str(var / "beat-state")]),
    ):
        children.append((_start(name, args, env, var), name))
    paused_once, counter = False, None
    cursor: EventCursor | None = None  # from the first event
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            _pause(0.5)
            if any(process.poll() is not None for process, _ in children):
                _say(f"a child process exited early; see the logs in {var}")
                return 1
            if counter is None and any(j.id == "count-to-ten" for j in kernel.list_jobs()):
                counter = kernel.run_now(
                    "count-to-ten", request_id=f"demo-{uuid.uuid4().hex[:8]}", operator="demo"
                ).occurrence.id
                _say(f"run-now count-to-ten -> occurrence {counter}")
            found, cursor = kernel.follow_events(cursor, limit=200)
            for event in found:
                _say(_describe(event))
            if counter is not None and not paused_once:
                paused_once = _pause_and_resume(kernel, counter)
        _stop_all(children)
        counts = {k: v for k, v in kernel.status()["counts"].items() if v}
        _say("occurrences by status: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if counter is not None:
            final = kernel.get_occurrence(counter)
            _say(
                f"count-to-ten: {final.status.value}, attempt {final.attempt}, "
                f"result {json.dumps(final.result)}"
            )
    finally:
        kernel.close()
    _say("inspect this kernel with:")
    for command in _inspect_commands(env["KERNEL_DATABASE_URL"]):
        print(f"  {command}", flush=True)
    return 0 if counts.get("succeeded") else 1


def _pause_and_resume(kernel: Any, occurrence_id: int) -> bool:
    """Pause the counter once it runs, wait for the checkpoint, resume it. True when done."""
    occurrence = kernel.get_occurrence(occurrence_id)
    if occurrence.status.value != "running" or occurrence.control is not None:
        return occurrence.control is not None
    kernel.request_pause(
        occurrence_id,
        expected_fence=occurrence.fence,
        request_id=f"pause-{occurrence_id}",
        safe_points=CHECKPOINT_V1.safe_points,
        operator="demo",
    )
    _say(f"pause requested for occurrence {occurrence_id}")
    for _ in range(40):
        _pause(0.25)
        occurrence = kernel.get_occurrence(occurrence_id)
        if occurrence.control is not None and occurrence.control.state.value == "paused":
            _say(f"paused with checkpoint {json.dumps(occurrence.checkpoint)}; resuming")
            kernel.resume(occurrence_id, request_id=f"resume-{occurrence_id}", operator="demo")
            return True
    _say("the pause was not acknowledged in 10 s")
    return True


if __name__ == "__main__":
    sys.exit(main())
