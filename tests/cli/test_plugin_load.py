"""The ``kernel`` plug-in costs nothing to a ``celery`` command that does not run it.

Celery imports every installed ``celery.commands`` plug-in at the start of each
``celery`` command, whatever the app: a worker of another project in the same
environment must not load the kernel, SQLAlchemy or the web console through it.
"""

from __future__ import annotations

import subprocess
import sys

LOADED = """
import sys
import celery.bin.celery
heavy = ("kernel", "sqlalchemy", "fastapi", "celery_app.cli.jobs")
print(sorted(name for name in heavy if name in sys.modules))
print("kernel" in celery.bin.celery.celery.commands)
"""


def test_celery_loads_the_plugin_without_the_kernel_or_its_commands() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", LOADED], capture_output=True, text=True, timeout=60
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split("\n")[:2] == ["[]", "True"]
