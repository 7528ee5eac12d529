"""The session's PostgreSQL and Redis fixtures give real, working, isolated servers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

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
