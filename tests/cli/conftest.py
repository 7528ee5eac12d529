"""Fixtures for the ``celery -A celery_app kernel`` tests.

Every test gets its own migrated SQLite file, named to the CLI by
``KERNEL_DATABASE_URL`` exactly as an operator would, and a :class:`Kernel` on the
same file to arrange state (claims, failures, pauses) the way workers do.
``cli(...)`` runs the real ``celery`` entry point in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner, Result

from kernel import Kernel

CELERY = str(Path(sys.executable).with_name("celery"))


@dataclass
class Run:
    """One CLI invocation's outcome."""

    result: Result

    @property
    def code(self) -> int:
        return self.result.exit_code

    @property
    def out(self) -> str:
        return self.result.stdout

    @property
    def err(self) -> str:
        return self.result.stderr

    def json(self) -> Any:
        return json.loads(self.result.stdout)


Cli = Callable[..., Run]


@pytest.fixture
def db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite URL in ``tmp_path``, exported as ``KERNEL_DATABASE_URL`` (not migrated)."""
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    monkeypatch.setenv("KERNEL_DATABASE_URL", url)
    return url


@pytest.fixture
def kernel(db_url: str) -> Iterator[Kernel]:
    """A migrated kernel on the CLI's database."""
    opened = Kernel.open(db_url, migrate_schema=True)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def cli() -> Cli:
    """``cli("jobs", "list", "--json")`` runs ``celery -A celery_app kernel jobs list --json``."""
    runner = CliRunner()

    def run(*args: str) -> Run:
        result = runner.invoke(
            celery_main, ["-A", "celery_app", "kernel", *args], catch_exceptions=True
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Run(result)

    return run


@pytest.fixture
def spawn(tmp_path: Path, db_url: str) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start ``celery -A celery_app kernel ARGS`` as a process; every one is stopped afterwards."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "KERNEL_DATABASE_URL": db_url}
        proc = subprocess.Popen(
            [CELERY, "-A", "celery_app", "kernel", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
