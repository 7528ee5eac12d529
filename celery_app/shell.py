"""The ``celery`` command line a hint prints: one that runs as printed.

A hint names the app in use (the ``-A`` it was started with, else the app's name) and
the ``celery`` of this environment: plain ``celery`` when that is the one on ``PATH``,
else its full path (a virtualenv that is not activated).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

__all__ = ["celery_command"]


def celery_command(app: Any, *words: str) -> str:
    """``celery -A APP WORDS...`` as a person would type it in this environment."""
    return shlex.join([*_celery_program(), "-A", _app_name(app), *words])


def _celery_program() -> list[str]:
    ours = Path(sys.executable).with_name("celery")
    if not ours.is_file():
        return [sys.executable, "-m", "celery"]
    found = shutil.which("celery")
    if found and os.path.samefile(found, ours):
        return ["celery"]
    return [str(ours)]


def _app_name(app: Any) -> str:
    """The ``-A`` (``--app``) value this process was started with, else the app's name."""
    argv = sys.argv
    for index, arg in enumerate(argv):
        if arg in ("-A", "--app") and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--app="):
            return arg.removeprefix("--app=")
        if arg.startswith("-A") and len(arg) > 2:
            return arg[2:]
    return str(getattr(app, "main", None) or "celery_app")
