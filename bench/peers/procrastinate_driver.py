"""procrastinate driver for bench/peers.py (commands in bench/peers/README.md).

Written from procrastinate's documentation: an ``App`` on a ``PsycopgConnector``,
``batch_defer_async`` to enqueue, ``run_worker_async`` with its ``concurrency``, and a
``periodic`` task (six cron fields: seconds) that every worker's deferrer offers and
the database de-duplicates. Durability: procrastinate's default, each job's state
change its own committed transaction.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import procrastinate
import redis.asyncio as aioredis

QUEUE = "bench"
_redis = aioredis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=sys.argv[2]))


@app.task(name="bench_noop", queue=QUEUE)
async def noop(key: str) -> None:
    await _redis.incr(key)


@app.periodic(cron="* * * * * *")
@app.task(name="bench_tick", queue=QUEUE)
async def tick(timestamp: int) -> None:
    await _redis.rpush(os.environ["BENCH_LEDGER"], repr(float(timestamp)))


async def main(command: str, args: list[str]) -> None:
    async with app.open_async():
        if command == "install":
            await app.schema_manager.apply_schema_async()
        elif command == "enqueue":
            n, key = int(args[0]), args[1]
            started = time.monotonic()
            for i in range(0, n, 1000):
                await noop.batch_defer_async(*({"key": key} for _ in range(min(1000, n - i))))
            print(started, flush=True)
        elif command in ("work", "schedule"):
            if command == "schedule":
                os.environ["BENCH_LEDGER"] = args[1]
            await app.run_worker_async(queues=[QUEUE], concurrency=int(args[0]))
        else:
            raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[3:]))
