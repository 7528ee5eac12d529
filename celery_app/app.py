"""The Celery app: ``celery -A celery_app worker|beat|flower|kernel``.

Your own tasks and ``beat_schedule`` go in a config module named by
``CELERY_CONFIG_MODULE`` (plain Celery configuration), or in a module that
imports ``celery_app.app`` and adds to it.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from celery import Celery

from celery_app.config import embedded_broker_options

__all__ = ["app", "create_app"]


def create_app(main: str = "celery_app", **conf: Any) -> Celery:
    """Build a Celery app wired to the kernel; keyword arguments override configuration."""
    celery = Celery(main)
    celery.conf.update(**DEFAULTS)
    if not os.environ.get("CELERY_BROKER_URL"):
        celery.conf.broker_url = "filesystem://"
    user_module = os.environ.get("CELERY_CONFIG_MODULE")
    if user_module:
        # The user's settings win over ours, as if they had written them here.
        module = importlib.import_module(user_module)
        celery.conf.update(
            {k: v for k, v in vars(module).items() if k.islower() and not k.startswith("_")}
        )
    celery.conf.update(conf)
    if str(celery.conf.broker_url).startswith("filesystem://"):
        # The embedded broker's folders, unless the user's options name their own.
        options = celery.conf.broker_transport_options or {}
        celery.conf.broker_transport_options = {**embedded_broker_options(), **options}
    return celery


DEFAULTS: dict[str, Any] = dict(
    # Messages are hints carrying an occurrence id; JSON is all they need.
    task_serializer="json",
    result_serializer="json",
    event_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    # Results live in the kernel; a hint lost with its worker is re-published by the pump.
    task_ignore_result=True,
    task_acks_late=False,
    worker_prefetch_multiplier=1,
    # Flower shows each run under its job's name (the shadow) from the worker's events.
    # No task-sent events: those carry the real task name and could overwrite the job's.
    worker_send_task_events=True,
    task_send_sent_event=False,
    beat_scheduler="beat_schedule.scheduler:KernelScheduler",
    beat_max_loop_interval=1,
    broker_connection_retry_on_startup=True,
)


app = create_app()
