"""celery-kernel's Celery glue: the app, the run_occurrence task, the worker runtime and the CLI."""

from __future__ import annotations

from celery_app import signals, tasks
from celery_app.app import app

__all__ = ["app", "signals", "tasks"]
