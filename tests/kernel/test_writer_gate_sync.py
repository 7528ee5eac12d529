"""SQLite: the held connection commits under the gate without SQLite's sync and syncs the WAL
after releasing it; every other connection stays FULL, and a read syncs what it may have seen."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from kernel import Kernel
from kernel.errors import StorageUnavailable
from kernel.transaction import session as session_module
from tests.kernel.file_kernel import file_kernel

_NORMAL, _FULL = 1, 2


def _kernel(path: Path, n: int = 2) -> tuple[Kernel, list[int]]:
    kernel = file_kernel(path, max_queued=100)
    at = kernel.now() - timedelta(seconds=1)
    report = kernel.fire(
        "job",
        expected_revision=1,
        expected_cursor=None,
        firings=[(f"k{i}", at) for i in range(n)],
        next_cursor=("after", at),
    )
    return kernel, list(report.created)


def _pragma(conn: object) -> int:
    dbapi = conn.connection.dbapi_connection  # type: ignore[attr-defined]
    return int(dbapi.execute("PRAGMA synchronous").fetchone()[0])


def _counters(kernel: Kernel) -> list[int]:
    gate = kernel._session._gate
    assert gate is not None
    gate.unsynced()  # maps the shared file if this process has not yet
    return list(gate._mutex.counters)  # type: ignore[union-attr]


def test_a_write_returns_synced_and_only_the_held_connection_is_normal(tmp_path: Path) -> None:
    kernel, ids = _kernel(tmp_path / "k.db")
    try:
        claim = kernel.claim(ids[0], owner="w", lease=60)
        assert claim is not None
        held = kernel._session._held
        assert held.conn is not None and _pragma(held.conn) == _NORMAL
        begun, written, durable = _counters(kernel)
        assert begun == written == durable > 0  # committed, and synced before claim returned
        with kernel._session.engine.connect() as other:
            assert _pragma(other) == _FULL
        kernel.succeed(ids[0], owner="w", fence=claim.fence, result=None)
        assert _counters(kernel) == [begun + 1] * 3
    finally:
        kernel.close()
    # Given back to the pool at FULL: whatever takes it next is synced by SQLite.
    reopened = Kernel.open(f"sqlite:///{tmp_path / 'k.db'}")
    try:
        with reopened._session.engine.connect() as conn:
            assert _pragma(conn) == _FULL
    finally:
        reopened.close()


def test_the_engines_normal_opt_in_is_left_alone(tmp_path: Path) -> None:
    first, ids = _kernel(tmp_path / "k.db")
    first.close()
    kernel = Kernel.open(f"sqlite:///{tmp_path / 'k.db'}", sqlite_synchronous="NORMAL")
    try:
        assert kernel.claim(ids[0], owner="w", lease=60) is not None
        held = kernel._session._held
        assert not held.normal and _pragma(held.conn) == _NORMAL
    finally:
        kernel.close()


DIES_BEFORE_ITS_SYNC = """
import os, signal, sys
from kernel import Kernel
from kernel.transaction import session
def die(*_):  # the process is killed between its COMMIT and its sync of the WAL
    os.kill(os.getpid(), signal.SIGKILL)
session.KeptWal.sync = die
kernel = Kernel.open(sys.argv[1])
kernel.claim(int(sys.argv[2]), owner="doomed", lease=60)
"""


def test_a_read_syncs_a_commit_whose_writer_died_before_its_sync(tmp_path: Path) -> None:
    kernel, ids = _kernel(tmp_path / "k.db")
    try:
        before = _counters(kernel)
        child = subprocess.run(
            [sys.executable, "-c", DIES_BEFORE_ITS_SYNC, f"sqlite:///{tmp_path / 'k.db'}",
             str(ids[1])],
            timeout=60,
        )  # fmt: skip
        assert child.returncode == -9
        begun, written, durable = _counters(kernel)
        assert begun == written == before[0] + 1 and durable == before[2]
        # The commit is visible; the read that sees it syncs it before answering.
        assert kernel.get_occurrence(ids[1]).status == "running"
        assert _counters(kernel) == [begun] * 3
    finally:
        kernel.close()


def test_a_sync_that_fails_says_the_commit_is_not_known_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel, ids = _kernel(tmp_path / "k.db")

    def eio(*_: object) -> None:  # a disk that fails fsync cannot be made here
        raise OSError(5, "Input/output error")

    try:
        monkeypatch.setattr(session_module.KeptWal, "sync", eio)
        with pytest.raises(StorageUnavailable) as raised:
            kernel.claim(ids[0], owner="w", lease=60)
        assert raised.value.commit_state == "unknown"
        assert "did not confirm" in raised.value.message
        begun, written, durable = _counters(kernel)
        assert durable < begun  # readers keep syncing (and fail too) rather than report it
    finally:
        monkeypatch.undo()
        kernel.close()
