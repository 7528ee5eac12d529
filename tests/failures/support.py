"""Helpers for the failure tests: real entry points as processes, and misbehaving servers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Done", "HangingServer", "Proxy", "clean_env", "run", "start", "stop"]

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without our variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "KERNEL_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


@dataclass
class Done:
    code: int
    out: str
    err: str
    seconds: float

    def assert_no_traceback(self) -> None:
        assert "Traceback" not in self.out + self.err, self.out + self.err


def run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 60) -> Done:
    """Run ``python -m <args>`` (``celery ...`` or ``celery_app.demo``) to its end."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Done(done.returncode, done.stdout, done.stderr, time.monotonic() - began)


def start(args: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m <args>`` in a process group of its own, output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> tuple[int, float]:
    """Send ``sig`` to the process group, as a terminal's Ctrl-C does; (exit code, seconds)."""
    began = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        code = proc.wait(timeout)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return code, time.monotonic() - began


class HangingServer:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self._held.append(self._sock.accept()[0])

    def close(self) -> None:
        _close_listener(self._sock)
        for conn in self._held:
            conn.close()


class Proxy:
    """A TCP proxy on 127.0.0.1 to ``target``; ``down()`` drops and refuses connections."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        probe = socket.create_server(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._conns: list[socket.socket] = []
        self._sock: socket.socket | None = None
        self.up()

    def up(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._sock,), daemon=True).start()

    def down(self) -> None:
        assert self._sock is not None
        _close_listener(self._sock)
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._conns.clear()

    def _accept(self, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                client = server.accept()[0]
                upstream = socket.create_connection(self.target)
                self._conns += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _close_listener(sock: socket.socket) -> None:
    """Close a listening socket; shutdown() first wakes the thread blocked in accept()."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def hanging_server() -> Iterator[HangingServer]:
    server = HangingServer()
    try:
        yield server
    finally:
        server.close()
