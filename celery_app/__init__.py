"""celery-kernel's Celery glue: the app, the run_occurrence task, the worker runtime and the CLI.

``install(app)`` puts the kernel onto your own Celery app; ``current_run`` is a task
body's view of the occurrence it runs as. The ready-made app (``celery -A
celery_app``) is built on first access to ``celery_app.app``, not on import, so that
importing ``install`` or ``current_run`` (or loading the ``kernel`` CLI plug-in)
creates no app and reads no configuration module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery_app.enqueueing import enqueue, enqueue_many, result
    from celery_app.factory import create_app
    from celery_app.installation import install
    from celery_app.run_context import current_run

__all__ = ["app", "create_app", "current_run", "enqueue", "enqueue_many", "install", "result"]

#: The ready-made app, built by :func:`__getattr__` when first asked for.
app: Any

# Imported when first used: Celery imports the ``kernel`` CLI plug-in, and so this
# package, at the start of every ``celery`` command, of any app. No submodule may share a
# name with one of these: importing it would bind the module over the function.
_LAZY = {
    "create_app": "celery_app.factory",
    "install": "celery_app.installation",
    "current_run": "celery_app.run_context",
    "enqueue": "celery_app.enqueueing",
    "enqueue_many": "celery_app.enqueueing",
    "result": "celery_app.enqueueing",
}


def __getattr__(name: str) -> Any:
    if name == "app":
        global app
        app = importlib.import_module("celery_app.factory").create_app()
        return app
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'celery_app' has no attribute {name!r}")
