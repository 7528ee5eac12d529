"""The names celery-kernel installs (issue 38, item 11), tried as a user's project meets them.

The wheel installs the top-level packages ``celery_app``, ``kernel``, ``adapters`` and
``beat_schedule``. A project with a module of one of these names stops ``celery`` with
one sentence naming both files and the fix, never runs the other app silently; the
kernel's own app from an installed (non-editable) copy keeps its embedded files out of
``site-packages``; a PostgreSQL URL without the driver names the ``postgres`` extra.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))

MINE = """\
from celery import Celery
app = Celery("mine", broker="memory://")
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "KERNEL_"))}
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def _celery(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The ``celery`` command as a user runs it (its script, so the current directory is
    not first on the path)."""
    return subprocess.run(
        [CELERY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("layout", ["celery_app.py", "celery_app/__init__.py"])
def test_a_projects_own_celery_app_stops_celery_with_one_sentence(
    tmp_path: Path, layout: str
) -> None:
    mine = tmp_path / layout
    mine.parent.mkdir(exist_ok=True)
    mine.write_text(MINE)
    done = _celery(tmp_path, _env(), "-A", "celery_app", "report")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    [sentence] = [line for line in done.stderr.splitlines() if line.strip()]
    assert str(mine.parent if layout.endswith("__init__.py") else mine) in sentence
    assert "celery_app" in sentence and "rename" in sentence


def test_the_kernels_own_app_installed_keeps_its_files_out_of_site_packages(
    tmp_path: Path,
) -> None:
    # The packages as a (non-editable) install lays them out; the entry points of this
    # virtualenv's celery-kernel then load these copies, first on the path.
    site = tmp_path / "lib" / "python3" / "site-packages"
    for package in ("celery_app", "kernel", "adapters", "beat_schedule"):
        shutil.copytree(ROOT / package, site / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    home, project = tmp_path / "home", tmp_path / "somewhere"
    home.mkdir()
    project.mkdir()
    env = _env(PYTHONPATH=str(site), HOME=str(home))
    env.pop("XDG_DATA_HOME", None)
    done = _celery(project, env, "-A", "celery_app", "kernel", "doctor", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    settings = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "settings")
    assert str(site) not in settings["detail"] and str(home) in settings["detail"], settings
    assert not (site / "var").exists()
    ran = subprocess.run(
        [sys.executable, "-c", "import celery_app; print(celery_app.__file__)"],
        cwd=project, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.stdout.strip() == str(site / "celery_app" / "__init__.py")  # the installed copy


BLOCK_PSYCOPG = """\
import sys
class _NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name == "psycopg" or name.startswith("psycopg."):
            raise ModuleNotFoundError("No module named 'psycopg'", name="psycopg")
sys.meta_path.insert(0, _NoPsycopg())
"""


@pytest.mark.parametrize("command", [["kernel", "status"], ["kernel", "doctor"]])
def test_a_postgresql_url_without_the_driver_names_the_extra(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_PSYCOPG)
    env = _env(
        PYTHONPATH=str(tmp_path),
        KERNEL_DATABASE_URL="postgresql+psycopg://kernel@127.0.0.1:1/kernel",
    )
    done = _celery(tmp_path, env, "-A", "celery_app", *command)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output, output
    assert "pip install 'celery-kernel[postgres]'" in output, output
