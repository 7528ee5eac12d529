"""Building the Celery app of ``celery -A celery_app worker|beat|flower|kernel``.

Your own tasks and ``beat_schedule`` go in a config module named by
``CELERY_CONFIG_MODULE`` (plain Celery configuration), or in a module that
imports ``celery_app.app`` (built on first access) and adds to it. A project with its
own ``Celery()`` instance calls :func:`celery_app.install` on it instead.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.utils.imports import import_from_cwd

from celery_app.installation import install

__all__ = ["create_app"]


def create_app(main: str = "celery_app", **conf: Any) -> Celery:
    """Build a Celery app wired to the kernel; keyword arguments override configuration."""
    celery = Celery(main)
    user_module = os.environ.get("CELERY_CONFIG_MODULE")
    if user_module:
        # Found from the working directory, as `celery worker` finds the -A module.
        module = import_from_cwd(user_module)
        celery.conf.update(
            {k: v for k, v in vars(module).items() if k.islower() and not k.startswith("_")}
        )
    celery.conf.update(conf)
    return install(celery)  # with the embedded broker unless the configuration names one
