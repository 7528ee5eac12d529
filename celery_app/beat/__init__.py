"""KernelScheduler: Beat materialises due firings through the kernel and pumps hints.

Any number of Beats may run: the kernel's cursor compare-and-set and unique
firing keys make a second Beat's work a no-op, with no leader lock.

Failures are sentences: a setting Beat cannot use ends it at start with exit 2, an
unreachable kernel at start with exit 1; an outage while running logs one warning
and, when it ends, one info with its length. SIGTERM and Ctrl-C (exit 130) let the
tick under way finish — its new occurrences get their hints — then Beat
deregisters and exits.

The parts, by noun: ``scheduler`` (Celery's hooks, the tick, stop and outage
handling), ``firings`` (materialising due firings and pumping their hints),
``upkeep`` (heartbeat, lease expiry, approval timeouts, watchdog, retention).
"""

from __future__ import annotations

from celery_app.beat.firings import plan_job
from celery_app.beat.scheduler import KernelScheduler

__all__ = ["KernelScheduler", "plan_job"]
