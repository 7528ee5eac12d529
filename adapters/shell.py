"""The ``shell`` adapter: run an argv list as a child process, never through a shell.

The child gets a scrubbed environment (a small fixed base, the names the job
allows, and the job's own values) so worker secrets such as the broker or
database URL never leak into it. It runs in its own session, so a timeout or a
cancel can stop the whole process group: SIGTERM first, SIGKILL after a grace;
when the command itself exits, whatever is left of its group is killed.
Output is read concurrently into bounded tail buffers, so a chatty child can
neither block on a full pipe nor fill the worker's memory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import IO, Any

from adapters.base import (
    NO_RUNTIME_CONTROL,
    AdapterError,
    BaseAdapter,
    Cancelled,
    ExecutionContext,
    payload_value,
    tail_text,
)

__all__ = ["ShellAdapter", "BASE_ENV", "DEFAULT_OUTPUT_LIMIT"]

#: Worker environment variables every child inherits (when the worker has them).
BASE_ENV = ("PATH", "HOME", "LANG")
#: Bytes of stdout and of stderr kept (the tail) unless the payload says otherwise.
DEFAULT_OUTPUT_LIMIT = 64 * 1024
_STDERR_IN_MESSAGE = 500


class ShellAdapter(BaseAdapter):
    """Runs ``payload["argv"]``; the result is ``{exit_code, stdout, stderr, truncated}``.

    Payload keys: ``argv`` (required, list of strings), ``cwd``, ``env``
    (name → value), ``env_allow`` (worker variable names to pass through) and
    ``output_limit`` (bytes kept per stream). A running child cannot be paused.
    """

    kind = "shell"
    runtime_control = NO_RUNTIME_CONTROL
    #: Seconds a process group gets between SIGTERM and SIGKILL.
    kill_grace_s: float = 5.0
    #: How often the wait loop looks at the cancel event and the deadline.
    poll_interval_s: float = 0.05

    def execute(self, ctx: ExecutionContext) -> Any:
        argv, cwd, child_env, limit = _command(ctx.occurrence.payload)
        if ctx.cancelled.is_set():
            raise Cancelled(f"occurrence {ctx.occurrence.id} was cancelled before it started")
        process = _spawn(argv, cwd, child_env)
        ctx.logger.info(
            "shell command started",
            extra={
                "action": "shell_started",
                "occurrence_id": ctx.occurrence.id,
                "pid": process.pid,
            },
        )
        assert process.stdout is not None and process.stderr is not None  # both are PIPEs
        stdout, stderr = _Tail(process.stdout, limit), _Tail(process.stderr, limit)
        reason = None
        try:
            reason = self._wait(process, ctx)
        finally:
            if process.returncode is None:
                self._stop(process, ctx)
            # The group must not outlive the command: leftovers would hold our pipes.
            _signal_group(process, signal.SIGKILL)
        out, out_cut = stdout.finish(self.kill_grace_s)
        err, err_cut = stderr.finish(self.kill_grace_s)
        if reason == "cancelled":
            raise Cancelled(f"occurrence {ctx.occurrence.id} was cancelled; {argv[0]!r} stopped")
        if reason == "timeout":
            raise AdapterError(
                "TIMEOUT",
                f"{argv[0]!r} timed out after {ctx.timeout_s}s{_stderr_note(err)}",
                retryable=True,
            )
        if process.returncode != 0:
            raise AdapterError(
                "SHELL_EXIT",
                f"{argv[0]!r} {_exit_text(process.returncode)}{_stderr_note(err)}",
                retryable=True,
            )
        return {"exit_code": 0, "stdout": out, "stderr": err, "truncated": out_cut or err_cut}

    def _wait(self, process: subprocess.Popen[bytes], ctx: ExecutionContext) -> str | None:
        """Wait for exit; return ``"timeout"`` or ``"cancelled"`` when it must be stopped."""
        deadline = None if ctx.timeout_s is None else time.monotonic() + ctx.timeout_s
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return "timeout"
            step = (
                self.poll_interval_s if remaining is None else min(self.poll_interval_s, remaining)
            )
            try:
                process.wait(timeout=step)
                return None
            except subprocess.TimeoutExpired:
                if ctx.cancelled.is_set():
                    return "cancelled"

    def _stop(self, process: subprocess.Popen[bytes], ctx: ExecutionContext) -> None:
        """SIGTERM the process group, then SIGKILL it if the leader outlives the grace."""
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=self.kill_grace_s)
        except subprocess.TimeoutExpired:
            ctx.logger.warning(
                "shell command ignored SIGTERM for %ss; killing it",
                self.kill_grace_s,
                extra={"action": "shell_killed", "occurrence_id": ctx.occurrence.id},
            )
            _signal_group(process, signal.SIGKILL)
            process.wait()


class _Tail:
    """Drains one pipe on a thread, keeping only the last ``limit`` bytes."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._data = bytearray()
        self._total = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="shell-output", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with self._stream:
            fd = self._stream.fileno()
            while chunk := os.read(fd, 65536):
                with self._lock:
                    self._total += len(chunk)
                    self._data += chunk
                    excess = len(self._data) - self._limit
                    if excess > 0:
                        del self._data[:excess]

    def finish(self, timeout: float) -> tuple[str, bool]:
        """Text kept so far and whether anything was dropped.

        The join is bounded because a process that escaped the group (setsid)
        may keep the pipe open indefinitely; its later output is then ignored.
        """
        self._thread.join(timeout)
        with self._lock:
            return self._data.decode("utf-8", errors="replace"), self._total > self._limit


def _command(payload: dict[str, Any]) -> tuple[list[str], str | None, dict[str, str], int]:
    """Read the payload: argv, cwd, the child's whole environment, the output limit."""
    argv = _strings(payload, "argv", required=True)
    if not argv:
        raise _invalid("payload.argv must not be empty")
    cwd = payload_value(payload, "cwd", str, None)
    env = payload_value(payload, "env", dict, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _invalid("payload.env must map names to string values")
    limit = payload_value(payload, "output_limit", int, DEFAULT_OUTPUT_LIMIT)
    if isinstance(limit, bool) or limit < 0:
        raise _invalid("payload.output_limit must be a non-negative integer")
    allowed = (*BASE_ENV, *_strings(payload, "env_allow", required=False))
    child_env = {name: os.environ[name] for name in allowed if name in os.environ}
    child_env.update(env)
    return argv, cwd, child_env, limit


def _spawn(argv: list[str], cwd: str | None, env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            shell=False,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except (FileNotFoundError, NotADirectoryError) as exc:
        missing = "working directory" if cwd is not None and exc.filename == cwd else "executable"
        raise AdapterError(
            "SHELL_NOT_FOUND", f"{missing} {exc.filename!r} not found", retryable=False
        ) from exc
    except PermissionError as exc:
        raise AdapterError(
            "SHELL_NOT_FOUND", f"cannot execute {argv[0]!r}: {exc.strerror}", retryable=False
        ) from exc
    except ValueError as exc:  # NUL bytes or '=' in names: the payload is unusable
        raise _invalid(f"cannot start {argv[0]!r}: {exc}") from exc


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(process.pid, signum)


def _strings(payload: dict[str, Any], key: str, *, required: bool) -> list[str]:
    values: list[Any] = (
        payload_value(payload, key, list) if required else payload_value(payload, key, list, [])
    )
    if not all(isinstance(value, str) for value in values):
        raise _invalid(f"payload.{key} must be a list of strings")
    return values


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


def _invalid(message: str) -> AdapterError:
    return AdapterError("INVALID_PAYLOAD", message, retryable=False)
