"""SQLite: the WAL synced after a held connection's commit through a descriptor kept for that
connection, and never through one that may name a WAL file SQLite has since deleted.

Every sync is checked against the file at the WAL's path at that moment (device and inode);
the old file is kept open meanwhile so that its inode cannot be reused by the new one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from kernel import Kernel
from kernel.db import writer_gate
from kernel.errors import StorageUnavailable
from tests.kernel.file_kernel import file_kernel


def _kernel(path: Path) -> Kernel:
    return file_kernel(path, max_queued=1000)


_CURSORS: dict[int, str] = {}


def _runs(kernel: Kernel, n: int, tag: str) -> None:
    """``n`` occurrences made, claimed and settled: three held commits each."""
    at = kernel.now() - timedelta(seconds=1)
    cursor = _CURSORS.get(id(kernel))
    _CURSORS[id(kernel)] = f"after-{tag}"
    report = kernel.fire(
        "job",
        expected_revision=1,
        expected_cursor=cursor,
        firings=[(f"{tag}{i}", at) for i in range(n)],
        next_cursor=(f"after-{tag}", at),
    )
    for occ_id in report.created:
        claim = kernel.claim(occ_id, owner="w", lease=60)
        assert claim is not None
        kernel.succeed(occ_id, owner="w", fence=claim.fence, result=None)


class _Syncs:
    """Every ``fdatasync`` of the WAL from writer_gate, with whether it named the file at
    the path then; every ``open`` of the WAL there."""

    def __init__(self, wal: str) -> None:
        self.wal = wal
        self.synced: list[bool] = []
        self.opened = 0
        self.fail_next = False

    def open(self, path: str, flags: int, *args: int) -> int:
        if path == self.wal:
            self.opened += 1
        return os.open(path, flags, *args)

    def fdatasync(self, fd: int) -> None:
        if self.fail_next:  # a disk that fails fsync cannot be made here
            self.fail_next = False
            raise OSError(5, "Input/output error")
        named, current = os.fstat(fd), os.stat(self.wal)
        self.synced.append((named.st_dev, named.st_ino) == (current.st_dev, current.st_ino))
        os.fdatasync(fd)


@pytest.fixture
def syncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Syncs]:
    seen = _Syncs(f"{tmp_path / 'k.db'}-wal")

    class _Os:  # writer_gate's os, with these two watched
        def __getattr__(self, name: str) -> object:
            return getattr(seen, name) if name in ("open", "fdatasync") else getattr(os, name)

    monkeypatch.setattr(writer_gate, "os", _Os())
    yield seen


def test_the_held_connections_syncs_open_the_wal_once(tmp_path: Path, syncs: _Syncs) -> None:
    # Fails before the kept descriptor: one open per sync (22 here).
    kernel = _kernel(tmp_path / "k.db")
    try:
        _runs(kernel, 10, "a")
    finally:
        kernel.close()
    assert len(syncs.synced) >= 20 and all(syncs.synced)
    assert syncs.opened == 1


def test_checkpoints_that_restart_or_truncate_the_wal_keep_its_file(
    tmp_path: Path, syncs: _Syncs
) -> None:
    kernel = _kernel(tmp_path / "k.db")
    try:
        for mode in ("TRUNCATE", "RESTART", "PASSIVE", "TRUNCATE"):
            _runs(kernel, 2, mode)
            with kernel._session.engine.connect() as conn:
                dbapi = conn.connection.dbapi_connection
                busy = dbapi.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()[0]  # type: ignore[union-attr]
                assert busy == 0
        _runs(kernel, 2, "last")
    finally:
        kernel.close()
    assert all(syncs.synced) and syncs.opened == 1


def test_a_wal_deleted_with_the_last_connection_is_never_synced_again(
    tmp_path: Path, syncs: _Syncs
) -> None:
    kernel = _kernel(tmp_path / "k.db")
    try:
        _runs(kernel, 2, "a")
        old = os.open(syncs.wal, os.O_RDONLY)  # the old file's inode stays taken
        try:
            # Every connection closed: SQLite checkpoints and deletes the WAL; the held
            # connection's next statement reconnects, and the next commit makes a new one.
            held = kernel._session._held
            assert held.conn is not None
            held.conn.invalidate()
            kernel._session.engine.dispose()
            assert not os.path.exists(syncs.wal)
            _runs(kernel, 2, "b")
            assert os.fstat(old).st_ino != os.stat(syncs.wal).st_ino
        finally:
            os.close(old)
    finally:
        kernel.close()
    assert len(syncs.synced) >= 8 and all(syncs.synced)
    assert syncs.opened == 2


def test_a_forked_process_syncs_through_its_own_descriptor(tmp_path: Path, syncs: _Syncs) -> None:
    kernel = _kernel(tmp_path / "k.db")
    try:
        _runs(kernel, 1, "parent")
        inherited = kernel._session._held.wal.fd
        assert inherited is not None
        go_read, go_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: waits until its parent closed the database, then writes
            code = 1
            try:
                os.close(go_write)
                os.read(go_read, 1)
                kernel._session.engine.dispose(close=False)  # as a prefork child does
                syncs.synced.clear()
                _runs(kernel, 2, "child")
                fd = kernel._session._held.wal.fd
                code = 0 if fd not in (None, inherited) and all(syncs.synced) else 2
            finally:
                os._exit(code)
        os.close(go_read)
        old = os.open(syncs.wal, os.O_RDONLY)
        try:
            kernel.close()  # the last connection in any process: the WAL is deleted
            assert not os.path.exists(syncs.wal)
            os.write(go_write, b"x")
            os.close(go_write)
            _, status = os.waitpid(pid, 0)
        finally:
            os.close(old)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        kernel.close()


OTHER_WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("CREATE TABLE IF NOT EXISTS other (x)")
conn.execute("INSERT INTO other VALUES (1)")
conn.close()
"""


def test_another_process_closing_its_connection_leaves_the_wal_in_place(
    tmp_path: Path, syncs: _Syncs
) -> None:
    # What the kept descriptor rests on: while the held connection is open, no other
    # connection's close deletes the WAL (it is the same file before and after).
    kernel = _kernel(tmp_path / "k.db")
    try:
        _runs(kernel, 1, "a")
        before = os.stat(syncs.wal).st_ino
        for i in range(3):
            subprocess.run([sys.executable, "-c", OTHER_WRITER, str(tmp_path / "k.db")],
                           check=True, timeout=60)  # fmt: skip
            assert os.stat(syncs.wal).st_ino == before
            _runs(kernel, 1, f"b{i}")
    finally:
        kernel.close()
    assert all(syncs.synced) and syncs.opened == 1


def test_a_descriptor_whose_sync_failed_is_not_used_again(tmp_path: Path, syncs: _Syncs) -> None:
    kernel = _kernel(tmp_path / "k.db")
    try:
        _runs(kernel, 1, "a")
        syncs.fail_next = True
        with pytest.raises(StorageUnavailable):
            _runs(kernel, 1, "b")
        assert kernel._session._held.wal.fd is None
        _runs(kernel, 1, "c")
    finally:
        kernel.close()
    assert all(syncs.synced) and syncs.opened == 2
