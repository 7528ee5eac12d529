"""A statement sent alone on PostgreSQL (``Tx.alone``): psycopg's autocommit flag stored
directly, and no ``commit()`` after it (``kernel.db.driver.switch_autocommit``, ``finish``).

What is pinned: the flag the kernel writes is the one psycopg's next statement reads (a
psycopg that changed it fails here, not silently in production); the held connection is
back out of autocommit after every statement sent alone, so what runs after it is one
transaction; and the worker's claim and success call neither psycopg's setter nor its
``commit()`` (both went through psycopg's lock and wait loop for nothing to send).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from kernel.db.driver import psycopg_idle, switch_autocommit
from kernel.store import Kernel
from tests.kernel.conftest import Harness
from tests.servers import libpq_url


@pytest.fixture
def pg_conn(pg_database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(libpq_url(pg_database_url)) as conn:
        conn.execute("CREATE TABLE marks (n int)")
        conn.commit()
        yield conn


def _marks(url: str) -> list[int]:
    with psycopg.connect(libpq_url(url), autocommit=True) as other:
        return [n for (n,) in other.execute("SELECT n FROM marks ORDER BY n")]


def test_the_flag_stored_is_the_one_psycopg_reads(
    pg_conn: psycopg.Connection[Any], pg_database_url: str
) -> None:
    assert psycopg_idle(pg_conn)
    switch_autocommit(pg_conn, True)
    assert pg_conn.autocommit is True
    pg_conn.execute("INSERT INTO marks VALUES (1)")
    # Sent without BEGIN: committed by itself, nothing left open.
    assert pg_conn.info.transaction_status == TransactionStatus.IDLE
    assert _marks(pg_database_url) == [1]
    switch_autocommit(pg_conn, False)
    assert pg_conn.autocommit is False
    pg_conn.execute("INSERT INTO marks VALUES (2)")
    # BEGIN sent first: open until committed, invisible to others.
    assert pg_conn.info.transaction_status == TransactionStatus.INTRANS
    assert not psycopg_idle(pg_conn)
    assert _marks(pg_database_url) == [1]
    pg_conn.rollback()
    assert _marks(pg_database_url) == [1]


def test_not_idle_in_a_pipeline(pg_conn: psycopg.Connection[Any]) -> None:
    with pg_conn.pipeline():
        assert not psycopg_idle(pg_conn)
    assert psycopg_idle(pg_conn)


def _postgres(k: Harness) -> Kernel:
    if k.backend != "postgres":
        pytest.skip("statements go alone on PostgreSQL only")
    return k.kernel


def _driver(kernel: Kernel) -> Any:
    conn = kernel._session._held.conn
    assert conn is not None
    return conn.connection.dbapi_connection


def test_claim_and_success_call_neither_setter_nor_commit(
    k: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails before: the claim and the success each switched autocommit through psycopg's
    setter twice and called its ``commit()`` once."""
    kernel = _postgres(k)
    first, second = k.occurrences(n=2)
    k.succeed(first, None)  # the held connection is open from here on
    driver = _driver(kernel)
    calls: list[str] = []
    real_commit, real_setter = driver.commit, type(driver).set_autocommit
    monkeypatch.setattr(driver, "commit", lambda: calls.append("commit") or real_commit())

    def setter(self: Any, value: bool) -> None:
        calls.append(f"autocommit={value}")
        real_setter(self, value)

    monkeypatch.setattr(type(driver), "set_autocommit", setter)
    claim = kernel.claim(second, owner="w1", lease=30)
    assert claim is not None
    kernel.succeed(second, owner="w1", fence=claim.fence, result={"ok": 1})
    assert calls == []
    assert kernel.get_occurrence(second).status == "succeeded"


def test_out_of_autocommit_after_every_statement_sent_alone(k: Harness) -> None:
    """What follows a statement sent alone (a refusal included) is a transaction again."""
    kernel = _postgres(k)
    first, second = k.occurrences(n=2)
    claim = kernel.claim(first, owner="w1", lease=30)
    assert claim is not None
    driver = _driver(kernel)
    assert driver.autocommit is False and psycopg_idle(driver)
    kernel.succeed(first, owner="w1", fence=claim.fence)
    assert driver.autocommit is False and psycopg_idle(driver)
    # A claim the statement refuses (already settled) goes on as an ordinary transaction.
    assert kernel.claim(first, owner="w1", lease=30) is None
    assert driver.autocommit is False and psycopg_idle(driver)
    again = kernel.claim(second, owner="w1", lease=30)
    assert again is not None and again.fence == 1
