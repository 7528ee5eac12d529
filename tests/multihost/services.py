"""PostgreSQL, Redis and RabbitMQ on the services host, listening on its bridge address,
restartable.

Unlike ``tests/servers.py`` (one start, one stop), a chaos run kills and restarts these
servers on the same data directory, so each keeps its argv and is started again by it.
Both run as the unprivileged server account (``nsenter --setuid``), inside the services
namespace; the PID we hold is the server's own.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import redis
from multihost.netns import Host
from servers import (
    POSTGRES_DATABASE,
    ServerUnavailable,
    _accepts,
    _as_account,
    _make_workdir,
    _postgres_bindir,
    _run_initdb,
    _server_account,
    _tail,
    rabbitmq_argv,
    rabbitmq_env,
    rabbitmq_epmd,
)

__all__ = ["Postgres", "RabbitMQ", "Redis", "Service"]

_ROLE = "kernel"
_PG_PORT = 5432
_REDIS_PORT = 6379
_AMQP_PORT = 5672
_EPMD_PORT = 4369


class Service:
    """One server process on ``host``, started from ``argv()``; killable and restartable."""

    #: The signal that asks this server for a fast, clean shutdown.
    stop_signal = signal.SIGTERM

    def __init__(self, name: str, host: Host, workdir: Path) -> None:
        self.name = name
        self.host = host
        self.workdir = workdir
        self.log_path = workdir / "server.log"
        self.account = _server_account()
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        """The server's environment (None: ours)."""
        return None

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it answers."""
        owner: list[str] = []
        if self.account is not None:
            owner = [f"--setuid={self.account.pw_uid}", f"--setgid={self.account.pw_gid}"]
        argv = self.host.argv(self.argv())
        argv[1:1] = owner  # nsenter's options go before its "--"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env(),
            )
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ServerUnavailable(f"{self.name} did not start:\n{_tail(self.log_path)}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server by PID, as a crash would."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self, timeout: float = 15.0) -> None:
        """Ask for a clean stop with ``stop_signal``; SIGKILL after ``timeout``."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class Postgres(Service):
    """A throw-away cluster accepting trust connections from the test subnet only."""

    stop_signal = signal.SIGINT

    def __init__(self, host: Host) -> None:
        account = _server_account()
        super().__init__("postgres", host, _make_workdir("kernel-chaos-pg-", account))
        self.bindir = _postgres_bindir()
        self.data = self.workdir / "data"
        _run_initdb(self.bindir, self.data, self.workdir, account, 60.0)
        subnet = host.address.rsplit(".", 1)[0] + ".0/24"
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {subnet} trust\n")
        self.url = f"postgresql+psycopg://{_ROLE}@{host.address}:{_PG_PORT}/{POSTGRES_DATABASE}"

    def argv(self) -> list[str]:
        return [
            str(self.bindir / "postgres"),
            "-D", str(self.data),
            "-p", str(_PG_PORT),
            "-c", f"listen_addresses={self.host.address}",
            "-c", f"unix_socket_directories={self.workdir}",
            "-c", "fsync=off",
            "-c", "full_page_writes=off",
            "-c", "max_connections=200",
        ]  # fmt: skip

    def _conninfo(self, dbname: str) -> str:
        return f"host={self.host.address} port={_PG_PORT} user={_ROLE} dbname={dbname}"

    def ready(self) -> bool:
        try:
            with psycopg.connect(self._conninfo("postgres"), connect_timeout=1):
                return True
        except psycopg.OperationalError:
            return False

    def create_database(self) -> None:
        with psycopg.connect(self._conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{POSTGRES_DATABASE}"')

    def pg_ctl_stop(self, mode: str) -> None:
        """``pg_ctl stop -m <mode>`` as the cluster's owner, then reap the postmaster."""
        assert self.process is not None
        subprocess.run(
            [str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w"],
            cwd=self.workdir,
            capture_output=True,
            check=True,
            timeout=60,
            **_as_account(self.account),
        )
        self.process.wait(30)


class Redis(Service):
    """The broker; ``persistent`` turns on the append-only file (fsync always) for restarts."""

    def __init__(self, host: Host) -> None:
        super().__init__("redis", host, _make_workdir("kernel-chaos-redis-", _server_account()))
        self.persistent = False
        self.url = f"redis://{host.address}:{_REDIS_PORT}/0"

    def argv(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServerUnavailable("redis-server not found on PATH (apt-get install redis-server)")
        persistence = ["--appendonly", "yes", "--appendfsync", "always"]
        return [
            binary,
            "--port", str(_REDIS_PORT),
            "--bind", self.host.address,
            # Reachable only inside the test namespaces; no password needed.
            "--protected-mode", "no",
            "--save", "",
            *(persistence if self.persistent else ["--appendonly", "no"]),
            "--dir", str(self.workdir),
            "--daemonize", "no",
        ]  # fmt: skip

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host.address, port=_REDIS_PORT, socket_connect_timeout=1)

    def ready(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def turn_on_persistence(self) -> None:
        """Switch the running server to an append-only file and wait until it is written."""
        with self.client() as client:
            client.config_set("appendonly", "yes")
            client.config_set("appendfsync", "always")
            while True:
                info = client.info("persistence")
                if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                    break
                time.sleep(0.1)
        self.persistent = True  # the restart keeps the append-only file on

    def crash_and_restart(self, *, kept: bool) -> str:
        """SIGKILL Redis and start it again, with its queue kept (append-only file) or lost."""
        if kept:
            self.turn_on_persistence()
        self.kill()
        self.persistent = kept
        time.sleep(1.0)
        self.start()
        return f"kill -9 redis-server, restarted with its queue {'kept' if kept else 'lost'}"


class RabbitMQ(Service):
    """The broker on RabbitMQ, with its own port mapper (epmd), kept across the node's
    restarts as a host's would be. Celery declares its queues durable and publishes
    persistent messages, so a node restarted on its data keeps them."""

    def __init__(self, host: Host) -> None:
        super().__init__(
            "rabbitmq", host, _make_workdir("kernel-chaos-rabbitmq-", _server_account())
        )
        self.url = f"amqp://guest:guest@{host.address}:{_AMQP_PORT}//"
        self.epmd: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return rabbitmq_argv(self.workdir, self.host.address, _AMQP_PORT)

    def env(self) -> dict[str, str]:
        return rabbitmq_env(self.workdir, self.host.address, _AMQP_PORT, _EPMD_PORT)

    def ready(self) -> bool:
        return _accepts(self.host.address, _AMQP_PORT)

    def start(self, timeout: float = 120.0) -> None:
        if self.epmd is None:  # the harness runs in this host's namespace; so does epmd
            self.epmd = rabbitmq_epmd(self.workdir, self.account, "127.0.0.1", _EPMD_PORT)
        super().start(timeout)

    def remove(self) -> None:
        super().remove()
        if self.epmd is not None:
            self.epmd.terminate()
            self.epmd.wait()

    def crash_and_restart(self, *, kept: bool) -> str:
        """SIGKILL the node and start it again on its data (queues kept) or on none."""
        self.kill()
        if not kept:
            shutil.rmtree(self.workdir / "mnesia", ignore_errors=True)
        down = time.monotonic()
        self.start()
        return (
            f"kill -9 rabbitmq node, restarted with its queues {'kept' if kept else 'lost'}"
            f" (down {time.monotonic() - down:.0f} s)"
        )
