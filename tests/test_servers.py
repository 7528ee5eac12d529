"""The session's PostgreSQL and Redis fixtures give real, working, isolated servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
import sqlalchemy as sa
from servers import fresh_database, libpq_url, start_redis
from sqlalchemy.engine import make_url


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_url)
    yield engine
    engine.dispose()


def test_postgres_url_serves_queries_through_sqlalchemy_and_psycopg(engine: sa.Engine) -> None:
    assert engine.dialect.driver == "psycopg"
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
        version = conn.execute(sa.text("SHOW server_version_num")).scalar_one()
    assert int(version) >= 150000


def test_redis_url_stores_and_returns_values(redis_url: str) -> None:
    key = f"test:{uuid.uuid4().hex}"
    with redis.Redis.from_url(redis_url) as client:
        client.set(key, "value", ex=60)
        assert client.get(key) == b"value"
        client.delete(key)


def test_pg_database_url_is_a_new_empty_database(
    pg_database_url: str, postgres_url: str, engine: sa.Engine
) -> None:
    assert make_url(pg_database_url).database != make_url(postgres_url).database
    fresh = sa.create_engine(pg_database_url)
    try:
        assert sa.inspect(fresh).get_table_names() == []
        with fresh.begin() as conn:
            conn.execute(sa.text("CREATE TABLE only_here (id integer)"))
        assert sa.inspect(fresh).get_table_names() == ["only_here"]
    finally:
        fresh.dispose()
    assert "only_here" not in sa.inspect(engine).get_table_names()


def test_fresh_database_is_dropped_on_exit_even_with_open_connections(
    engine: sa.Engine, postgres_url: str
) -> None:
    with fresh_database(postgres_url) as url:
        name = make_url(url).database
        # A session the test forgot to close must not keep the database alive.
        leaked = psycopg.connect(libpq_url(url))
    try:
        with pytest.raises(psycopg.OperationalError):
            leaked.execute("SELECT 1")
    finally:
        leaked.close()
    with engine.connect() as conn:
        exists = conn.execute(
            sa.text("SELECT count(*) FROM pg_database WHERE datname = :name"), {"name": name}
        ).scalar_one()
    assert exists == 0


def test_redis_server_stops_by_pid_and_removes_its_files(redis_url: str) -> None:
    # redis_url gates on redis-server being installed (skip locally, fail in CI).
    server = start_redis()
    try:
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
        assert server.url != redis_url
    finally:
        server.stop()
    assert server.process.returncode is not None
    assert not server.workdir.exists()


def test_a_server_is_stopped_when_the_process_that_started_it_is_killed(
    redis_url: str,
) -> None:
    # redis_url gates on redis-server being installed (skip locally, fail in CI).
    with subprocess.Popen(
        [sys.executable, "-c", _STARTS_AND_HANGS],
        cwd=Path(__file__).parent,
        stdout=subprocess.PIPE,
        text=True,
    ) as starter:
        assert starter.stdout is not None
        started = json.loads(starter.stdout.readline())
        try:
            with redis.Redis(port=started["port"]) as client:
                assert client.ping()
            starter.kill()  # no cleanup runs in it
            starter.wait()
            deadline = time.monotonic() + 30
            workdir = Path(started["workdir"])
            while (_alive(started["pid"]) or workdir.exists()) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _alive(started["pid"]), "the server outlived the process that started it"
            assert not workdir.exists()
        finally:
            starter.kill()
            if _alive(started["pid"]):
                os.kill(started["pid"], signal.SIGKILL)


#: A test process that starts a server and is then killed before it can stop it.
_STARTS_AND_HANGS = """
import json, time
from servers import start_redis
server = start_redis()
print(json.dumps({"pid": server.process.pid, "port": server.port,
                  "workdir": str(server.workdir)}), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
