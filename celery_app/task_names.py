"""The kernel's Celery task names: what a worker registers and Beat or a worker sends.

Strings only, so that Beat can send a task without loading the worker's task code
(runtime, adapters).
"""

from __future__ import annotations

__all__ = ["ADJUDICATE_OCCURRENCE", "NOTIFY", "RUN_OCCURRENCE"]

#: Claim through the kernel, run the adapter, settle (celery_app/tasks.py).
RUN_OCCURRENCE = "kernel.run_occurrence"
#: Ask an occurrence's adapter about its uncertain run (celery_app/adjudication.py).
ADJUDICATE_OCCURRENCE = "kernel.adjudicate_occurrence"
#: Deliver a failed run's notification (celery_app/notify.py).
NOTIFY = "kernel.notify"
