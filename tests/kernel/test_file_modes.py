"""The SQLite database, its WAL and SHM files and its folder are created private to their
owner whatever the umask, and ``checkup`` reports wider modes it finds."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel import Kernel


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022), under which files are created readable by everybody."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_sqlite_kernel_is_private_to_its_owner(tmp_path: Path, open_umask: None) -> None:
    folder = tmp_path / "var"
    kernel = Kernel.open(f"sqlite:///{folder / 'kernel.db'}", migrate_schema=True)
    try:
        kernel.define_job({"id": "a", "kind": "task", "payload": {"task": "x.y"}})
        modes = {p.name: _mode(p) for p in (folder, *folder.iterdir())}
        assert {"var", "kernel.db", "kernel.db-wal", "kernel.db-shm"} <= set(modes)
        assert modes.pop("var") == 0o700
        assert set(modes.values()) == {0o600}, modes
        assert ("file modes", "ok") in [(f.name, f.status) for f in kernel.checkup()]
        (folder / "kernel.db-wal").chmod(0o640)
        (modes_finding,) = [f for f in kernel.checkup() if f.name == "file modes"]
        assert modes_finding.status == "warn"
        assert f"{folder / 'kernel.db-wal'} is 0640" in modes_finding.detail
    finally:
        kernel.close()
