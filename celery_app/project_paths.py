"""Where a project's kernel files live: its project directory (relative paths are
anchored there, whatever the current directory) and its var directory (the embedded
defaults' files).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["project_dir", "var_dir"]


#: The folders pip installs packages into: never a project's directory.
_INSTALLED = frozenset({"site-packages", "dist-packages"})


def project_dir(app: Any = None) -> Path:
    """The directory relative kernel paths are anchored at, whatever the current directory.

    It is the directory holding the module that defines the app: ``CELERY_CONFIG_MODULE``
    when set (the settings of ``celery -A celery_app``), else the module the app is named
    after (``Celery("myproj")``: the folder of ``myproj.py``, or the one holding the
    package ``myproj/``). A module installed by pip (in ``site-packages``) has no
    project folder and nothing may be written among the installed files: its directory
    is ``celery-kernel/<module>`` in the user's data folder (``$XDG_DATA_HOME``, else
    ``~/.local/share``). An app named after no module on disk falls back to the
    current directory. ``app`` defaults to Celery's current app.
    """
    if app is None:
        from celery import current_app

        app = current_app
    for name in (os.environ.get("CELERY_CONFIG_MODULE"), getattr(app, "main", None)):
        folder = _module_root(name) if name else None
        if folder is not None and _INSTALLED.isdisjoint(folder.parts):
            return folder
        if folder is not None:
            data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
            return Path(data).absolute() / "celery-kernel" / str(name).partition(".")[0]
    return Path.cwd()


def _module_root(name: str) -> Path | None:
    """The folder holding the top-level module or package of ``name``, if it is a file."""
    top = name.partition(".")[0]
    # Imported already, most often (celery imports -A and its config from the current
    # directory, which it then takes off sys.path again).
    module = sys.modules.get(top)
    if module is not None:
        origin, package = getattr(module, "__file__", None), hasattr(module, "__path__")
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):  # ValueError: a module without a spec
            spec = None
        origin = spec.origin if spec is not None and spec.has_location else None
        package = bool(spec and spec.submodule_search_locations)
    if not origin:
        return None
    path = Path(origin).absolute()
    return path.parent.parent if package else path.parent


def var_dir(app: Any = None) -> Path:
    """Where the embedded defaults keep their files: ``KERNEL_VAR_DIR``, else ``var``, in
    :func:`project_dir` when relative (absolute either way)."""
    folder = Path(os.environ.get("KERNEL_VAR_DIR") or "var")
    return folder if folder.is_absolute() else project_dir(app) / folder
