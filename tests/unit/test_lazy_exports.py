"""``celery_app``'s lazily imported names stay the functions they name, whatever was
imported first (a submodule named like one of them would bind the module instead)."""

from __future__ import annotations

import subprocess
import sys

import celery_app


def test_every_lazy_name_is_its_function_after_its_module_was_imported() -> None:
    script = (
        "import importlib, types, celery_app\n"
        "for module in set(celery_app._LAZY.values()):\n"
        "    importlib.import_module(module)\n"
        "import celery_app.factory\n"
        "from celery_app import " + ", ".join(sorted(celery_app._LAZY)) + "\n"
        "names = " + repr(sorted(celery_app._LAZY)) + "\n"
        "bad = [n for n in names if isinstance(getattr(celery_app, n), types.ModuleType)]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
