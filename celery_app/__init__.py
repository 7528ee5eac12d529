"""celery-kernel's Celery glue: the app, the run_occurrence task, the worker runtime and the CLI.

``install(app)`` puts the kernel onto your own Celery app; ``current_run`` is a task
body's view of the occurrence it runs as. The ready-made app (``celery -A
celery_app``) is built on first access to ``celery_app.app``, not on import, so that
importing ``install`` or ``current_run`` (or loading the ``kernel`` CLI plug-in)
creates no app and reads no configuration module.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
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


#: The top-level packages celery-kernel installs, side by side.
_OURS = ("celery_app", "kernel", "adapters", "beat_schedule")


def _shadowing() -> tuple[str, Path] | None:
    """A module of one of our packages' names on the path (or in the current directory,
    where ``celery -A`` looks) that is not ours: (name, its file or folder).

    Another copy of celery-kernel (a checkout beside its installed copy) is ours too:
    its ``__init__.py`` reads the same.
    """
    home = Path(__file__).resolve().parent.parent
    for entry in dict.fromkeys([os.getcwd(), *sys.path]):
        base = Path(entry or os.getcwd())
        for name in _OURS:
            for found, target in (
                (base / f"{name}.py",) * 2,
                (base / name, base / name / "__init__.py"),
            ):
                if not target.is_file() or found.resolve() == home / name:
                    continue
                if target.read_bytes() != (home / name / "__init__.py").read_bytes():
                    return name, found
    return None


# Python imports one module per name: with a project's own `celery_app.py` beside ours,
# `celery -A` would run whichever came first, silently. Stop before either runs.
if (_clash := _shadowing()) is not None:
    sys.stderr.write(
        f"celery-kernel cannot start: {_clash[1]} has the name of celery-kernel's package "
        f"{_clash[0]!r} and Python imports only one of them, so celery would run the wrong "
        f"code; rename your module (for example to myproj_{_clash[0]}) and "
        "import or name it (celery -A) by its new name\n"
    )
    raise SystemExit(2)
