"""The ``shell`` adapter: run an argv list as a child process, never through a shell.

The child gets a scrubbed environment (a small fixed base, the names the job
allows, the job's own values, the secrets it names, and ``KERNEL_OCCURRENCE_ID``,
``KERNEL_JOB_ID``, ``KERNEL_FENCE``, ``KERNEL_ATTEMPT``) so worker secrets such as
the broker or database URL never leak into it. It runs under
:mod:`adapters.supervisor` in a session of its own: the supervisor kills every process
the command started (a cgroup v2 per run, or as their child subreaper), even those that
left its session, when the worker asks (timeout, cancel, lost lease), when the lease
deadline it was last told passes without a renewal (a frozen worker), and when the
worker dies; SIGTERM first, SIGKILL after the job's ``kill_grace``. Should the
supervisor itself be killed, the worker kills what its run's cgroup still holds, and so
does the next claim of the occurrence before it starts the command
(:mod:`adapters.run_cgroup`). Output is read concurrently into bounded tail buffers
(masked before they are cut) and into the run's captured output, so a chatty child can
neither block on a full pipe nor fill the worker's memory.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from adapters.base import (
    NO_RUNTIME_CONTROL,
    AdapterError,
    BaseAdapter,
    Cancelled,
    ExecutionContext,
    read_payload,
    tail_text,
)
from adapters.run_cgroup import cgroup_name, remove_leftovers
from adapters.secrets import StreamScrubber, resolve_secrets
from adapters.supervisor import CGROUP, SUBREAPER
from kernel import Effect, ShellPayload, holds_credential, is_sensitive_name

__all__ = ["ShellAdapter", "Finished", "BASE_ENV", "CONTAINMENT_ENV", "containment_mode"]

#: Worker environment variables every child inherits (when the worker has them).
BASE_ENV = ("PATH", "HOME", "LANG")
_SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
#: ``auto`` (default) or ``subreaper``: how shell runs are contained (adapters.supervisor).
CONTAINMENT_ENV = "KERNEL_CONTAINMENT"
_STDERR_IN_MESSAGE = 500


class ShellAdapter(BaseAdapter):
    """Runs ``payload["argv"]``; the result is ``{exit_code, stdout, stderr, truncated}``.

    The payload is the one :mod:`kernel.spec.payloads` validated: ``argv``, ``cwd``,
    ``env``, ``env_allow``, ``secrets`` and ``output_limit`` (bytes kept per stream
    in the result). A running child cannot be paused.
    """

    kind = "shell"
    runtime_control = NO_RUNTIME_CONTROL
    #: How often the wait loop looks at the cancel event, the deadlines and the lease.
    poll_interval_s: float = 0.05

    def execute(self, ctx: ExecutionContext) -> Any:
        payload = read_payload(ctx.occurrence.payload, ShellPayload)
        finished = self.run(ctx, payload)
        if finished.stopped == "cancelled":
            raise Cancelled(
                f"occurrence {ctx.occurrence.id} was cancelled; {payload.argv[0]!r} stopped"
            )
        problem = finished.problem(ctx.timeout_s)
        if problem is not None:
            code, message = problem
            raise AdapterError(
                code,
                message + _stderr_note(finished.stderr),
                retryable=True,
                effect=finished.effect,
            )
        return {
            "exit_code": 0,
            "stdout": finished.stdout,
            "stderr": finished.stderr,
            "truncated": finished.truncated,
        }

    def run(self, ctx: ExecutionContext, payload: ShellPayload) -> Finished:
        """Run ``payload``'s command to its end (or until it must be stopped).

        Raises:
            Cancelled: the occurrence was cancelled before the command started.
            AdapterError: non-retryable ``SHELL_NOT_FOUND`` or ``INVALID_PAYLOAD``: the
                command could not be started; retryable ``SHELL_LEFTOVERS``: processes
                an earlier run of the occurrence left could not be killed, so it was not.
        """
        argv, env = payload.argv, payload.env
        secrets = resolve_secrets(payload.secrets)
        stored = (v for k, v in env.items() if is_sensitive_name(k) or holds_credential(v))
        ctx.secrets.update(secrets.values(), stored)
        if ctx.cancelled.is_set():
            raise Cancelled(f"occurrence {ctx.occurrence.id} was cancelled before it started")
        child_env = {name: os.environ[name] for name in _inherited(payload) if name in os.environ}
        child_env.update(env, **secrets, **_identity(ctx))
        # What an earlier run left when its supervisor was killed with its worker.
        stuck = remove_leftovers(ctx.occurrence, ctx.logger)
        if stuck:
            raise AdapterError(
                "SHELL_LEFTOVERS",
                f"processes of an earlier run of occurrence {ctx.occurrence.id} are still "
                f"alive in {', '.join(map(str, stuck))} and could not be killed; "
                f"{argv[0]!r} was not started beside them",
                retryable=True,
            )
        cgroup = cgroup_name(ctx.occurrence)
        process, control = _spawn(argv, payload.cwd, child_env, ctx.kill_grace_s, cgroup)
        ctx.logger.info(
            "shell command started",
            extra={
                "action": "shell_started",
                "occurrence_id": ctx.occurrence.id,
                "pid": process.pid,
            },
        )
        limit = payload.output_limit
        assert process.stdout is not None and process.stderr is not None  # both are PIPEs
        stdout = _Tail(process.stdout, limit, "stdout", ctx)
        stderr = _Tail(process.stderr, limit, "stderr", ctx)
        try:
            reason = self._wait(process, control, ctx)
        finally:
            if process.poll() is None:  # the worker thread itself failed: stop the group now
                _send(control, "stop")
                process.wait()
            report = _read_report(control)
            # The group must not outlive the command: leftovers would hold our pipes.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            # A supervisor killed from outside left its cgroup, and in it what left the group.
            if remove_leftovers(ctx.occurrence, ctx.logger):
                ctx.logger.error(
                    "processes of this run could not be killed; the next claim of "
                    "occurrence %s will not start beside them",
                    ctx.occurrence.id,
                    extra={"action": "shell_leftovers", "occurrence_id": ctx.occurrence.id},
                )
        out, out_cut = stdout.finish(ctx.kill_grace_s)
        err, err_cut = stderr.finish(ctx.kill_grace_s)
        if "spawn_error" in report:
            failure = report["spawn_error"]
            raise AdapterError(
                "SHELL_NOT_FOUND",
                f"cannot start {argv[0]!r}: {failure['what']}: {failure['strerror']}",
                retryable=False,
            )
        # No report: the supervisor itself was killed (by SIGKILL from outside).
        returncode = int(report.get("returncode", process.wait()))
        return Finished(argv[0], returncode, out, err, out_cut or err_cut, reason)

    def _wait(
        self, process: subprocess.Popen[bytes], control: socket.socket, ctx: ExecutionContext
    ) -> str | None:
        """Wait for exit, keeping the supervisor's deadline current.

        Returns ``"timeout"`` or ``"cancelled"`` when the run had to be stopped.
        """
        timeout_at = None if ctx.timeout_s is None else time.monotonic() + ctx.timeout_s
        told: float | None = None
        reason = None
        while True:
            deadline = ctx.effects_deadline()
            if deadline is not None and deadline != told and reason is None:
                _send(control, f"deadline {deadline!r}")
                told = deadline
            if reason is None:
                if timeout_at is not None and time.monotonic() >= timeout_at:
                    reason = "timeout"
                elif ctx.cancelled.is_set():
                    reason = "cancelled"
                if reason is not None:
                    ctx.logger.info(
                        "stopping the shell command (%s): SIGTERM, SIGKILL after %ss",
                        reason,
                        ctx.kill_grace_s,
                        extra={"action": "shell_stopping", "occurrence_id": ctx.occurrence.id},
                    )
                    _send(control, "stop")
            try:
                process.wait(timeout=self.poll_interval_s)
                return reason
            except subprocess.TimeoutExpired:
                continue


@dataclass(frozen=True)
class Finished:
    """How a command ended.

    Attributes:
        program: ``argv[0]``.
        returncode: its exit code; negative when a signal killed it.
        stdout, stderr: the kept tails, secrets masked.
        truncated: whether either tail dropped output.
        stopped: ``"timeout"`` or ``"cancelled"`` when the worker stopped it, else None.
    """

    program: str
    returncode: int
    stdout: str
    stderr: str
    truncated: bool
    stopped: str | None

    @property
    def effect(self) -> Effect:
        """What a failed command is known to have done: a command that exited with a code
        said it failed; one stopped by its timeout or killed by a signal (the OOM killer,
        the supervisor at a deadline) was cut off mid-run, so its effect is unknown."""
        if self.stopped == "timeout" or self.returncode < 0:
            return Effect.UNKNOWN
        return Effect.NOT_APPLIED

    def problem(self, timeout_s: float | None) -> tuple[str, str] | None:
        """The error code and sentence of a command that did not succeed; None for exit 0."""
        if self.stopped == "timeout":
            return "TIMEOUT", f"{self.program!r} timed out after {timeout_s}s"
        if self.returncode != 0:
            return "SHELL_EXIT", f"{self.program!r} {_exit_text(self.returncode)}"
        return None


class _Tail:
    """Drains one pipe on a thread into the run's output, keeping the last ``limit`` bytes.

    The kept bytes are masked before they are cut (:class:`adapters.secrets.StreamScrubber`):
    a cut through a secret would leave a piece no later scrub could recognise.
    """

    def __init__(self, stream: IO[bytes], limit: int, name: str, ctx: ExecutionContext) -> None:
        self._stream = stream
        self._limit = limit
        self._name = name
        self._ctx = ctx
        self._data = bytearray()
        self._dropped = False
        self._scrubber = StreamScrubber()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="shell-output", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with self._stream:
            fd = self._stream.fileno()
            while chunk := os.read(fd, 65536):
                text = decoder.decode(chunk)
                self._ctx.write_output(self._name, text)
                self._keep(self._scrubber.feed(text, self._ctx.secrets))
            text = decoder.decode(b"", final=True)
            self._ctx.write_output(self._name, text)
            self._keep(self._scrubber.feed(text, self._ctx.secrets))
            self._keep(self._scrubber.close(self._ctx.secrets))

    def _keep(self, masked: str) -> None:
        with self._lock:
            self._data += masked.encode()
            excess = len(self._data) - self._limit
            if excess > 0:
                del self._data[:excess]
                self._dropped = True

    def finish(self, timeout: float) -> tuple[str, bool]:
        """Text kept so far, secrets masked, and whether anything was dropped.

        The join is bounded because a process that escaped the group (setsid)
        may keep the pipe open indefinitely; its later output is then ignored
        (and what the scrubber still holds back with it: it may be part of a secret).
        """
        self._thread.join(timeout)
        with self._lock:
            return self._data.decode("utf-8", errors="replace"), self._dropped


def _identity(ctx: ExecutionContext) -> dict[str, str]:
    """What the command may know of its run, e.g. to make its effects idempotent."""
    occurrence = ctx.occurrence
    return {
        "KERNEL_OCCURRENCE_ID": str(occurrence.id),
        "KERNEL_JOB_ID": occurrence.job_id,
        "KERNEL_FENCE": str(occurrence.fence),
        "KERNEL_ATTEMPT": str(occurrence.attempt),
    }


def _inherited(payload: ShellPayload) -> tuple[str, ...]:
    return (*BASE_ENV, *payload.env_allow)


def containment_mode() -> str:
    """How shell runs are contained: ``KERNEL_CONTAINMENT=subreaper`` forces the subreaper
    where a cgroup would serve (``auto``, the default: a cgroup v2 where the host allows it);
    see :func:`adapters.supervisor.containment`."""
    return SUBREAPER if os.environ.get(CONTAINMENT_ENV, "auto") == SUBREAPER else CGROUP


def _spawn(
    argv: list[str], cwd: str | None, env: dict[str, str], grace: float, cgroup: str
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start the supervisor (and through it the command); returns it and our control end.

    The command's environment goes over the control socket, not into the supervisor's.
    """
    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                _SUPERVISOR,
                repr(grace),
                cwd or "",
                containment_mode(),
                cgroup,
                "--",
                *argv,
            ],
            shell=False,
            env={},
            stdin=theirs.fileno(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except ValueError as exc:  # NUL bytes in an argument or the environment
        ours.close()
        raise AdapterError(
            "INVALID_PAYLOAD", f"cannot start {argv[0]!r}: {exc}", retryable=False
        ) from exc
    finally:
        theirs.close()
    _send(ours, json.dumps(env))
    return process, ours


def _send(control: socket.socket, line: str) -> None:
    with contextlib.suppress(OSError):  # the supervisor has already gone
        control.sendall(line.encode() + b"\n")


def _read_report(control: socket.socket) -> dict[str, Any]:
    """The supervisor's last word, or ``{}`` when it was killed before it could say it."""
    with control:
        control.settimeout(1.0)
        data = b""
        with contextlib.suppress(OSError):
            while chunk := control.recv(4096):
                data += chunk
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            report: dict[str, Any] = json.loads(line)
            return report
    return {}


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:  # real-time signals have no name
            name = str(-code)
        return f"was killed by signal {name}"
    return f"exited with code {code}"


def _stderr_note(stderr: str) -> str:
    text = stderr.strip()
    return f"; stderr: {tail_text(text, _STDERR_IN_MESSAGE)}" if text else ""
