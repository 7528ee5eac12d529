"""oban (Python) driver for bench/peers.py (commands in bench/peers/README.md).

Written from oban's documentation: ``Oban.create_pool``, ``oban.schema.install``, a
``@job`` function, ``enqueue_many`` of ``new(...)`` jobs, an ``Oban`` instance with
``queues={"bench": CONCURRENCY}``, and a cron job. Oban's cron has minute resolution
and only the elected leader inserts, so the schedule check uses every minute.
Durability: oban's default, each job's completion its own committed transaction.
Needs Python 3.12+; ``peers.py`` runs it on ``--oban-python``'s standard input.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import redis.asyncio as aioredis
from oban import Oban, job
from oban.schema import install

QUEUE = "bench"
_redis = aioredis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))


@job(queue=QUEUE)
async def noop(key: str) -> None:
    await _redis.incr(key)


if os.environ.get("BENCH_LEDGER"):

    @job(queue=QUEUE, cron="* * * * *")
    async def tick() -> None:
        await _redis.rpush(os.environ["BENCH_LEDGER"], repr(time.time()))


async def main(command: str, dsn: str, args: list[str]) -> None:
    pool = await Oban.create_pool(dsn)
    try:
        if command == "install":
            await install(pool)
        elif command == "enqueue":
            n, key = int(args[0]), args[1]
            async with Oban(pool=pool) as oban:
                started = time.monotonic()
                for i in range(0, n, 1000):
                    await oban.enqueue_many([noop.new(key) for _ in range(min(1000, n - i))])
            print(started, flush=True)
        elif command in ("work", "schedule"):
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            async with Oban(pool=pool, queues={QUEUE: int(args[0])}):
                await stop.wait()
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        await pool.close()


if __name__ == "__main__":
    # Fed on standard input (``python - CMD DSN ...``), argv[0] is "-".
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
