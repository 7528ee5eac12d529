"""PgQueuer driver for bench/peers.py (commands in bench/peers/README.md).

Written from PgQueuer's documentation: a ``QueueManager`` over an asyncpg connection,
an ``entrypoint``, ``Queries.enqueue`` with lists for a batch insert, ``run()`` with
its defaults (dequeue batches of 10, completions logged in batches), and a
``SchedulerManager`` with a six-field (seconds) cron ``schedule``. Durability:
PgQueuer's default, which buffers completion records and flushes them in batches.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import asyncpg
import redis.asyncio as aioredis
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job, Schedule
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.sm import SchedulerManager

ENTRYPOINT = "bench_noop"
_redis = aioredis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))


async def _work(dsn: str, ledger: str | None) -> None:
    connection = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(connection)))

    @qm.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        await _redis.incr(job.payload or b"")

    runners = [qm.run()]
    stoppers = [qm.shutdown]
    if ledger is not None:
        sm = SchedulerManager(Queries(AsyncpgDriver(await asyncpg.connect(dsn))))

        @sm.schedule("bench_tick", "* * * * * *")
        async def tick(schedule: Schedule) -> None:
            await _redis.rpush(ledger, repr(time.time()))

        runners.append(sm.run())
        stoppers.append(sm.shutdown)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: [event.set() for event in stoppers])
    await asyncio.gather(*runners)


async def main(command: str, dsn: str, args: list[str]) -> None:
    if command == "install":
        connection = await asyncpg.connect(dsn)
        await Queries(AsyncpgDriver(connection)).install()
        await connection.close()
    elif command == "enqueue":
        n, key = int(args[0]), args[1].encode()
        connection = await asyncpg.connect(dsn)
        queries = Queries(AsyncpgDriver(connection))
        started = time.monotonic()
        for i in range(0, n, 1000):
            size = min(1000, n - i)
            await queries.enqueue([ENTRYPOINT] * size, [key] * size, [0] * size)
        print(started, flush=True)
        await connection.close()
    elif command == "work":
        await _work(dsn, None)
    elif command == "schedule":
        await _work(dsn, args[1])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
