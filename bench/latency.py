"""How long one run waits on an idle worker: from when it could start to when its body began.

Each probe makes one run startable and returns that instant (epoch seconds); the body
(``bench/counter.py:stamp``) pushes the instant it began onto a Redis list. Probes are
spaced so that the worker is idle at each. The kernel's start is the commit of the
occurrence (claimable from then), followed by the pump's dispatch and publish as Beat's
pump does them (its polling interval is not included); stock Celery's is ``send_task``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import redis

__all__ = ["percentiles", "probe"]

#: Rest between probes, so each finds the worker idle.
PROBE_GAP_S = 0.05
POLL_S = 0.0005
PROBE_TIMEOUT_S = 30.0


def probe(
    start: Callable[[], float],
    broker: redis.Redis,
    key: str,
    probes: int,
    alive: Callable[[], None],
) -> list[float]:
    """Milliseconds from each ``start()`` to its body's stamp under ``key``, ``probes`` times."""
    latencies = []
    for i in range(probes):
        time.sleep(PROBE_GAP_S)
        began = start()
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while broker.llen(key) <= i:
            if time.monotonic() > deadline:
                raise RuntimeError(f"latency probe {i} did not start within {PROBE_TIMEOUT_S}s")
            alive()
            time.sleep(POLL_S)
        latencies.append((float(broker.lindex(key, i)) - began) * 1000)  # type: ignore[arg-type]
    return latencies


def percentiles(latencies: list[float]) -> tuple[float, float]:
    """(p50, p99) in the unit given."""
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return cuts[49], cuts[98]
