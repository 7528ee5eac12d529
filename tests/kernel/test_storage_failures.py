"""Storage failures surface as STORAGE_UNAVAILABLE and never half-apply a change (SPEC I8).

SQLite: the database lives on a 1 MiB tmpfs that the kernel's own writes fill, or
that is remounted read-only (``mode=ro`` files are covered in test_error_codes.py).
Mounting needs root (CI runs as root); elsewhere these tests skip with the reason.
PostgreSQL: the kernel's backend is terminated from a second connection in the middle
of a transaction, between calls, and during COMMIT.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from servers import libpq_url

from kernel.errors import StorageUnavailable
from kernel.store import Kernel
from kernel.testing import ManualClock

#: Each filling job carries this much payload text: a few dozen fill 1 MiB.
BIG = 40 * 1024
FILLER_BYTES = 128 * 1024


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for this test; unmounted after it. The migrated schema and
    its WAL take about half of it (a checkpoint at close needs room for both)."""
    where = tmp_path / "tiny"
    where.mkdir()
    done = (
        _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where))
        if sys.platform == "linux"
        else None
    )
    if done is None or done.returncode != 0:
        reason = f"cannot mount a tmpfs: {done.stderr.strip() if done else sys.platform}"
        if _in_ci():
            pytest.fail(f"{reason} (CI runs as root on Linux: this must work)", pytrace=False)
        pytest.skip(reason)
    try:
        yield where
    finally:
        # A file still open on it (a failed test's kernel) makes a plain umount fail and
        # would leave the mount behind for every later run: detach it lazily instead.
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(where)], check=True, capture_output=True)


def _job(job_id: str, size: int = BIG) -> dict[str, Any]:
    # Varied text: SQLite does not compress, but keep the pages honest anyway.
    text = (job_id * (size // len(job_id) + 1))[:size]
    return {"id": job_id, "kind": "callable", "payload": {"callable": "a:b", "args": [text]}}


def _integrity(kernel: Kernel) -> str:
    with kernel.engine.connect() as conn:
        return str(conn.exec_driver_sql("PRAGMA integrity_check").scalar_one())


def test_sqlite_disk_full_refuses_the_write_and_keeps_what_was_committed(tiny_fs: Path) -> None:
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\0" * FILLER_BYTES)
    kernel = Kernel.open(
        f"sqlite:///{tiny_fs / 'kernel.db'}", migrate_schema=True, clock=ManualClock()
    )
    try:
        committed: list[str] = []
        full = None
        for n in range(64):  # 1 MiB / 40 KiB: full long before this bound
            try:
                kernel.define_job(_job(f"fill-{n:02d}"))
            except StorageUnavailable as exc:
                full = exc
                break
            committed.append(f"fill-{n:02d}")
        assert full is not None, "the tmpfs never filled up"
        assert full.commit_state == "not_committed" and "SQLITE_FULL" in full.message
        assert committed, "the disk was full before the first write"

        assert _integrity(kernel) == "ok"
        assert [j.id for j in kernel.list_jobs()] == committed
        assert [e.job_id for e in kernel.events(limit=1000)] == committed

        filler.unlink()
        job, created = kernel.define_job(_job(f"fill-{len(committed):02d}"))
        assert created and len(kernel.list_jobs()) == len(committed) + 1
        assert _integrity(kernel) == "ok"
    finally:
        kernel.close()


def test_sqlite_on_a_read_only_filesystem_is_unavailable_until_writable(tiny_fs: Path) -> None:
    url = f"sqlite:///{tiny_fs / 'kernel.db'}"
    kernel = Kernel.open(url, migrate_schema=True, clock=ManualClock())
    kernel.define_job(_job("before", 64))
    kernel.close()  # a filesystem with files open for writing cannot be remounted read-only
    assert _mount("-o", "remount,ro", str(tiny_fs)).returncode == 0
    try:
        with pytest.raises(StorageUnavailable) as refused:
            Kernel.open(url, clock=ManualClock())
        assert refused.value.commit_state == "not_committed"
        assert "SQLITE_" in refused.value.message
    finally:
        assert _mount("-o", "remount,rw", str(tiny_fs)).returncode == 0
    kernel = Kernel.open(url, clock=ManualClock())
    try:
        kernel.define_job(_job("after", 64))
        assert [j.id for j in kernel.list_jobs()] == ["after", "before"]
        assert _integrity(kernel) == "ok"
    finally:
        kernel.close()


class _Terminator:
    """Terminates the kernel's PostgreSQL backend from a second connection when armed."""

    def __init__(self, url: str) -> None:
        self.admin = psycopg.connect(libpq_url(url), autocommit=True)
        self.armed = False

    def kill(self, conn: sa.Connection) -> None:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        self.admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


class _TerminatingClock(ManualClock):
    """A manual clock that kills the transaction's backend right after BEGIN, when armed.

    The clock is read once per kernel transaction, after it began and before any of
    its statements: the one seam in the public API that lands "in the middle".
    """

    def __init__(self, terminator: _Terminator) -> None:
        super().__init__()
        self.terminator = terminator

    def now_ms(self, conn: sa.Connection) -> int:
        if self.terminator.armed:
            self.terminator.kill(conn)
        return super().now_ms(conn)


@pytest.fixture
def pg_kernel(pg_database_url: str) -> Iterator[tuple[Kernel, _Terminator]]:
    terminator = _Terminator(pg_database_url)
    kernel = Kernel.open(pg_database_url, migrate_schema=True, clock=_TerminatingClock(terminator))
    try:
        yield kernel, terminator
    finally:
        kernel.close()
        terminator.admin.close()


def test_postgres_connection_loss_mid_transaction_is_storage_unavailable(
    pg_kernel: tuple[Kernel, _Terminator],
) -> None:
    kernel, terminator = pg_kernel
    kernel.define_job(_job("before", 64))
    terminator.armed = True
    with pytest.raises(StorageUnavailable) as lost:
        kernel.define_job(_job("during", 64))
    assert lost.value.commit_state == "not_committed"
    assert "terminat" in lost.value.message
    terminator.armed = False
    kernel.define_job(_job("after", 64))
    assert [j.id for j in kernel.list_jobs()] == ["after", "before"]
    assert [e.job_id for e in kernel.events()] == ["before", "after"]


def test_postgres_connection_lost_between_calls_is_repaired_by_the_next_call(
    pg_kernel: tuple[Kernel, _Terminator],
) -> None:
    kernel, terminator = pg_kernel
    kernel.define_job(_job("before", 64))
    terminator.admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    kernel.define_job(_job("after", 64))
    assert [j.id for j in kernel.list_jobs()] == ["after", "before"]


def test_postgres_connection_lost_between_claims_is_repaired_by_the_next_claim(
    pg_kernel: tuple[Kernel, _Terminator],
) -> None:
    """A plain claim and a plain success go alone (autocommit); a connection the server
    dropped while idle is repaired for them as for any transaction, with no error."""
    kernel, terminator = pg_kernel
    kernel.define_job({**_job("alone", 64), "overlap": "allow"})
    first, second = (
        kernel.run_now("alone", request_id=f"r{n}", operator="op").occurrence.id for n in (1, 2)
    )
    claim = kernel.claim(first, owner="w", lease=30)
    assert claim is not None

    def drop_idle_connections() -> None:
        terminator.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )

    drop_idle_connections()
    kernel.succeed(first, owner="w", fence=claim.fence)
    drop_idle_connections()
    again = kernel.claim(second, owner="w", lease=30)
    assert again is not None and again.fence == 1
    assert {o.id: o.status for o in kernel.list_occurrences(job_id="alone")} == {
        first: "succeeded",
        second: "running",
    }


def test_postgres_connection_lost_during_commit_is_an_unknown_commit(
    pg_kernel: tuple[Kernel, _Terminator],
) -> None:
    kernel, terminator = pg_kernel
    kernel.define_job(_job("before", 64))

    armed = True

    def kill_before_commit(conn: sa.Connection) -> None:
        if armed:
            terminator.kill(conn)

    sa.event.listen(kernel.engine, "commit", kill_before_commit)
    try:
        with pytest.raises(StorageUnavailable) as lost:
            kernel.define_job(_job("during", 64))
    finally:
        armed = False
        sa.event.remove(kernel.engine, "commit", kill_before_commit)
    assert lost.value.commit_state == "unknown"
    assert "perhaps committed" in lost.value.message
    # The kill came before COMMIT reached the server, so the change is in fact not there.
    assert [j.id for j in kernel.list_jobs()] == ["before"]
    kernel.define_job(_job("after", 64))
