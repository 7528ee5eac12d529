"""The static checks we promise: ruff everywhere, mypy (strict on kernel/ and beat_schedule/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing() -> None:
    lint = _run(str(BIN / "ruff"), "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    layout = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert layout.returncode == 0, layout.stdout + layout.stderr


def test_mypy_is_clean() -> None:
    typed = _run(sys.executable, "-m", "mypy", "kernel", "beat_schedule", "celery_app", "adapters")
    assert typed.returncode == 0, typed.stdout + typed.stderr


def test_kernel_never_imports_celery() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "kernel").rglob("*.py")
        if any(
            line.lstrip().startswith(("import celery", "from celery"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []
