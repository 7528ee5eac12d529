"""Real PostgreSQL, Redis and RabbitMQ servers for the test suite.

Each server runs from its own temporary directory, listens only on 127.0.0.1 on an
ephemeral port, and is stopped by the PID we started. PostgreSQL refuses to run as
root, so when the tests run as root both servers run as an unprivileged account:
``kernel-test`` (created by ``.ci/run``) if it exists, else ``nobody``. The process is
started with that uid directly (no ``su``/``runuser`` wrapper in between) so that the
PID we hold — and signal — is the server's own.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import HTTPServer
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import psycopg
import pytest
import redis
from psycopg import sql
from sqlalchemy.engine import make_url

__all__ = [
    "POSTGRES_DATABASE",
    "SERVER_USER",
    "RunningServer",
    "ServerUnavailable",
    "free_port",
    "fresh_database",
    "in_ci",
    "libpq_url",
    "serving",
    "start_postgres",
    "start_rabbitmq",
    "start_redis",
    "unavailable",
]

#: The unprivileged account ``.ci/run`` creates for servers started by root.
SERVER_USER = "kernel-test"
#: Database created in every PostgreSQL server this module starts.
POSTGRES_DATABASE = "kernel_test"
#: Superuser name given to ``initdb``; independent of the OS account.
_POSTGRES_ROLE = "kernel"
_LOG_TAIL_LINES = 30
# A port from free_port() can be taken by another process before the server binds
# it; retrying on a fresh port makes that race harmless.
_LAUNCH_ATTEMPTS = 3


def in_ci() -> bool:
    """Whether the suite runs in CI (``CI=true``), where every server must start."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def unavailable(reason: str) -> NoReturn:
    """What a test does when a server (or browser) it needs cannot start: skip on a
    workstation, fail under ``CI=true``, since CI installs them all and a skip there
    would hide a broken build."""
    if in_ci():
        pytest.fail(f"{reason}\n(CI=true: CI installs what the tests need)", pytrace=False)
    pytest.skip(reason)


class ServerUnavailable(RuntimeError):
    """A test server could not be found or started; the message says why."""


@dataclass
class RunningServer:
    """A server process this module started; owned by the caller until :meth:`stop`.

    Attributes:
        url: where to connect (SQLAlchemy URL for PostgreSQL, ``redis://`` for Redis).
        port: the TCP port on 127.0.0.1.
        process: the server process itself, so ``process.pid`` is the server's PID.
        workdir: temporary directory with data, sockets and the log; removed on stop.
        log_path: the server's combined stdout and stderr.
        stop_signal: the signal that asks this server for a fast, clean shutdown.
        helpers: processes the server needs (RabbitMQ's epmd), stopped after it.
    """

    url: str
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    log_path: Path
    stop_signal: signal.Signals
    helpers: tuple[subprocess.Popen[bytes], ...] = ()
    reaper: _Reaper | None = None

    def watch(self) -> None:
        """(Re)start the reaper that stops the server and its helpers by PID should this
        process die without :meth:`stop` (a test process killed)."""
        if self.reaper is not None:
            self.reaper.cancel()
        targets = [(self.process.pid, self.stop_signal)]
        targets += [(helper.pid, signal.SIGTERM) for helper in self.helpers]
        self.reaper = _Reaper(targets, self.workdir)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server by PID (SIGKILL if it outlives ``timeout``), then its helpers,
        then remove its files."""
        if self.reaper is not None:
            self.reaper.cancel()
            self.reaper = None
        for process, sig in [(self.process, self.stop_signal)] + [
            (helper, signal.SIGTERM) for helper in self.helpers
        ]:
            if process.poll() is None:
                process.send_signal(sig)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start_again(self, timeout: float = 30.0) -> None:
        """Start the server again after its process was stopped by PID (not by :meth:`stop`,
        which removes its files): the same command, data and port, as its account. Returns
        once it takes connections.

        Raises:
            ServerUnavailable: it did not take connections within ``timeout`` seconds.
        """
        assert self.process.poll() is not None, "the server is still running"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.process.args,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                **_as_account(_server_account()),
            )
        deadline = time.monotonic() + timeout
        while not _accepts("127.0.0.1", self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ServerUnavailable(f"not started again:\n{_tail(self.log_path)}")
            time.sleep(0.05)
        self.watch()


#: What a reaper runs: it waits for the end of a pipe only the starting process holds open,
#: then stops each ``pid:signal`` target (SIGKILL after 10 s) and removes the workdir.
_REAPER_CODE = """
import os, shutil, signal, sys, time
sys.stdin.buffer.read()
for target in sys.argv[2:]:
    pid, sig = map(int, target.split(":"))
    try:
        os.kill(pid, sig)
        for _ in range(100):
            time.sleep(0.1)
            os.kill(pid, 0)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
shutil.rmtree(sys.argv[1], ignore_errors=True)
"""


class _Reaper:
    """A process that stops a server by PID once the process that started it is gone
    without stopping it (SIGKILL, a crashed xdist worker): no server outlives its tests.
    It is in a session of its own, so the terminal's Ctrl-C leaves it to see the end."""

    def __init__(self, targets: list[tuple[int, signal.Signals]], workdir: Path) -> None:
        read_end, self._write_end = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _REAPER_CODE, str(workdir)]
                + [f"{pid}:{int(sig)}" for pid, sig in targets],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_end)

    def cancel(self) -> None:
        """The server is being stopped here: the reaper goes first, having done nothing."""
        self._process.kill()
        self._process.wait()
        os.close(self._write_end)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_postgres(
    timeout: float = 30.0, *, durable: bool = False, settings: dict[str, str] | None = None
) -> RunningServer:
    """Create a throw-away PostgreSQL cluster, start it and create ``kernel_test``.

    Durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``): the
    data dies with the session. ``durable=True`` keeps PostgreSQL's own defaults
    instead, as users run it (the benchmarks' default). ``settings`` are more server
    settings (``shared_preload_libraries``).

    Returns:
        The running server; ``url`` is
        ``postgresql+psycopg://kernel@127.0.0.1:PORT/kernel_test`` (trust auth).

    Raises:
        ServerUnavailable: the binaries are missing, initdb failed, or the server did
            not accept connections within ``timeout`` seconds.
    """
    bindir = _postgres_bindir()
    account = _server_account()
    workdir = _make_workdir("kernel-pg-", account)
    data = workdir / "data"
    try:
        _run_initdb(bindir, data, workdir, account, timeout)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise

    no_durability = ["fsync", "synchronous_commit", "full_page_writes"]

    def argv(port: int) -> list[str]:
        return [
            str(bindir / "postgres"),
            "-D", str(data),
            "-p", str(port),
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={workdir}",
            *(arg for name in ([] if durable else no_durability) for arg in ("-c", f"{name}=off")),
            "-c", "max_connections=200",
            *(arg for item in (settings or {}).items() for arg in ("-c", "=".join(item))),
        ]  # fmt: skip

    def admin_conninfo(port: int) -> str:
        return f"host=127.0.0.1 port={port} user={_POSTGRES_ROLE} dbname=postgres"

    def ready(port: int) -> bool:
        try:
            with psycopg.connect(admin_conninfo(port), connect_timeout=1):
                return True
        except psycopg.OperationalError:
            return False

    def url(port: int) -> str:
        return f"postgresql+psycopg://{_POSTGRES_ROLE}@127.0.0.1:{port}/{POSTGRES_DATABASE}"

    server = _launch(argv, ready, url, workdir, account, timeout, signal.SIGINT)
    try:
        with psycopg.connect(admin_conninfo(server.port), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(POSTGRES_DATABASE)))
    except BaseException:
        server.stop()
        raise
    return server


def start_redis(timeout: float = 10.0) -> RunningServer:
    """Start a Redis server with persistence off.

    Returns:
        The running server; ``url`` is ``redis://127.0.0.1:PORT/0``.

    Raises:
        ServerUnavailable: ``redis-server`` is not installed or did not answer PING
            within ``timeout`` seconds.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerUnavailable("redis-server not found on PATH (apt-get install redis-server)")
    account = _server_account()
    workdir = _make_workdir("kernel-redis-", account)

    def argv(port: int) -> list[str]:
        return [
            binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(workdir),
            "--daemonize", "no",
        ]  # fmt: skip

    def ready(port: int) -> bool:
        try:
            with redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1) as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def url(port: int) -> str:
        return f"redis://127.0.0.1:{port}/0"

    return _launch(argv, ready, url, workdir, account, timeout, signal.SIGTERM)


def start_rabbitmq(timeout: float = 90.0) -> RunningServer:
    """Start a RabbitMQ node (Debian's ``rabbitmq-server``) with no plugins.

    Its Erlang port mapper (epmd) is started first, by us, on a port of its own (a
    node would otherwise start a shared one on 4369 that outlives it); the node runs
    ``erl`` in the foreground, so the PID we hold is the broker's VM. The ``guest``
    account may connect from any address (the chaos run's hosts are not loopback).

    Returns:
        The running server; ``url`` is ``amqp://guest:guest@127.0.0.1:PORT//``.

    Raises:
        ServerUnavailable: ``rabbitmq-server`` is not installed or did not accept
            connections within ``timeout`` seconds.
    """
    account = _server_account()
    workdir = _make_workdir("kernel-rabbitmq-", account)
    epmd_port = free_port()
    try:
        epmd = rabbitmq_epmd(workdir, account, "127.0.0.1", epmd_port)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        server = _launch(
            lambda port: rabbitmq_argv(workdir, "127.0.0.1", port),
            lambda port: _accepts("127.0.0.1", port),
            lambda port: f"amqp://guest:guest@127.0.0.1:{port}//",
            workdir,
            account,
            timeout,
            signal.SIGTERM,
            env=lambda port: rabbitmq_env(workdir, "127.0.0.1", port, epmd_port),
        )
    except BaseException:
        epmd.kill()
        epmd.wait()
        raise
    server.helpers = (epmd,)
    server.watch()
    return server


#: The RabbitMQ scripts Debian installs; ``rabbitmq-server`` there runs the node itself
#: (``/usr/sbin/rabbitmq-server`` would switch to the ``rabbitmq`` account).
RABBITMQ_SCRIPTS = Path("/usr/lib/rabbitmq/bin")


def rabbitmq_epmd(
    workdir: Path, account: pwd.struct_passwd | None, address: str, port: int
) -> subprocess.Popen[bytes]:
    """The port mapper a RabbitMQ node in ``workdir`` registers with, in the foreground."""
    binary = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
    if not (RABBITMQ_SCRIPTS / "rabbitmq-server").exists() or not Path(binary).exists():
        raise ServerUnavailable("rabbitmq-server not installed (apt-get install rabbitmq-server)")
    with (workdir / "epmd.log").open("wb") as log:
        return subprocess.Popen(
            [binary, "-port", str(port), "-address", address],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            **_as_account(account),
        )


def rabbitmq_argv(workdir: Path, address: str, port: int) -> list[str]:
    (workdir / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = {address}:{port}\nloopback_users = none\n"
    )
    (workdir / "enabled_plugins").write_text("[].\n")
    return [str(RABBITMQ_SCRIPTS / "rabbitmq-server")]


def rabbitmq_env(workdir: Path, address: str, port: int, epmd_port: int) -> dict[str, str]:
    """The node's whole environment: its files in ``workdir``, its ports, no input shell."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),  # the Erlang cookie
        "LANG": "C.UTF-8",
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_NODENAME": f"rabbit-{port}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": address,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(workdir / "log"),
        "RABBITMQ_LOGS": "-",
        "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
        "RABBITMQ_PID_FILE": str(workdir / "rabbitmq.pid"),
        # Run erl in the foreground (no signal-forwarding shell), without its shell.
        "RABBITMQ_ALLOW_INPUT": "1",
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-noinput",
    }


def _accepts(address: str, port: int) -> bool:
    """Whether ``address:port`` takes an AMQP connection (the node listens only when ready)."""
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def fresh_database(server_url: str, template: str | None = None) -> Iterator[str]:
    """Create a uniquely named database beside ``server_url``'s; drop it on exit.

    Args:
        server_url: SQLAlchemy URL of any database on the server; its credentials are
            used to create and drop the new one.
        template: a database (no session on it) the new one is a copy of; else empty.

    Yields:
        The new database's SQLAlchemy URL (same driver and credentials).
    """
    name = f"kt_{uuid.uuid4().hex[:16]}"
    admin = libpq_url(server_url)
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(create)
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            # FORCE terminates sessions a test left open, which would block the drop.
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL ``url`` as a libpq URI that ``psycopg.connect`` accepts."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _postgres_bindir() -> Path:
    """Find a directory holding ``initdb`` and ``postgres``, preferring PostgreSQL 15."""
    candidates = [Path("/usr/lib/postgresql/15/bin")]
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    on_path = shutil.which("postgres")
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    for bindir in candidates:
        if all(os.access(bindir / tool, os.X_OK) for tool in ("initdb", "postgres")):
            return bindir
    raise ServerUnavailable(
        "PostgreSQL server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin"
        " or on PATH (apt-get install postgresql-15)"
    )


def _server_account() -> pwd.struct_passwd | None:
    """The account servers run as: ``None`` (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in (SERVER_USER, "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServerUnavailable(f"running as root and neither {SERVER_USER!r} nor 'nobody' exists")


def _as_account(account: pwd.struct_passwd | None) -> dict[str, Any]:
    """Popen keyword arguments that run the child as ``account`` (no-op for ourselves)."""
    if account is None:
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _make_workdir(prefix: str, account: pwd.struct_passwd | None) -> Path:
    """A private temporary directory that ``account`` owns."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    if account is not None:
        os.chown(workdir, account.pw_uid, account.pw_gid)
    return workdir


def _run_initdb(
    bindir: Path, data: Path, workdir: Path, account: pwd.struct_passwd | None, timeout: float
) -> None:
    """Create the cluster in ``data``; raise ServerUnavailable with initdb's output on failure."""
    log_path = workdir / "initdb.log"
    with log_path.open("wb") as log:
        done = subprocess.run(
            [
                str(bindir / "initdb"),
                f"--pgdata={data}",
                f"--username={_POSTGRES_ROLE}",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
            **_as_account(account),
        )
    if done.returncode != 0:
        raise ServerUnavailable(f"initdb exited with {done.returncode}:\n{_tail(log_path)}")


def _launch(
    argv: Callable[[int], list[str]],
    ready: Callable[[int], bool],
    url: Callable[[int], str],
    workdir: Path,
    account: pwd.struct_passwd | None,
    timeout: float,
    stop_signal: signal.Signals,
    env: Callable[[int], dict[str, str]] | None = None,
) -> RunningServer:
    """Start ``argv(port)`` (in ``env(port)`` if given) on a free port and wait until
    ``ready(port)``.

    Removes ``workdir`` when it gives up.
    """
    log_path = workdir / "server.log"
    deadline = time.monotonic() + timeout
    server: RunningServer | None = None
    try:
        for _attempt in range(_LAUNCH_ATTEMPTS):
            port = free_port()
            with log_path.open("wb") as log:
                process = subprocess.Popen(
                    argv(port),
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env(port) if env is not None else None,
                    **_as_account(account),
                )
            server = RunningServer(url(port), port, process, workdir, log_path, stop_signal)
            server.watch()
            while process.poll() is None and time.monotonic() < deadline:
                if ready(port):
                    return server
                time.sleep(0.05)
            if process.poll() is None:
                raise ServerUnavailable(
                    f"{argv(port)[0]} did not become ready within {timeout:.0f}s:\n"
                    f"{_tail(log_path)}"
                )
        raise ServerUnavailable(
            f"{argv(port)[0]} exited with {process.returncode}:\n{_tail(log_path)}"
        )
    except BaseException:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _tail(path: Path) -> str:
    """The last lines of a log file, for error messages."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(lines[-_LOG_TAIL_LINES:])


HTTPServerT = TypeVar("HTTPServerT", bound=HTTPServer)


@contextmanager
def serving(server: HTTPServerT) -> Iterator[HTTPServerT]:
    """Serve ``server`` (a loopback HTTP server a test made) from a thread while in the block."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
