"""Found by the chaos run: ``Kernel.now()`` lets a lost PostgreSQL connection escape raw.

During ``pg_ctl stop -m fast`` the harness's ``Kernel.now()`` raised SQLAlchemy's
``OperationalError`` ("connection refused") where the other kernel calls raise
``STORAGE_UNAVAILABLE`` (SPEC I8). Beat calls ``now()`` in every tick, so a database
outage showed there as a traceback. Pinned here since the fix (kernel/transaction/session.py).
"""

from __future__ import annotations

import pytest
from servers import ServerUnavailable, start_postgres, unavailable

from kernel import Kernel, StorageUnavailable


def test_now_on_a_stopped_server_is_storage_unavailable() -> None:
    try:
        server = start_postgres()
    except ServerUnavailable as exc:
        unavailable(str(exc))
    try:
        kernel = Kernel.open(server.url, migrate_schema=True)
        try:
            server.process.send_signal(server.stop_signal)  # fast: clients are cut off
            server.process.wait(30)
            with pytest.raises(StorageUnavailable):
                kernel.list_occurrences()  # the other reads already translate
            with pytest.raises(StorageUnavailable):
                kernel.now()
        finally:
            kernel.close()
    finally:
        server.stop()
