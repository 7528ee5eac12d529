"""The static checks we promise: ruff everywhere, mypy (strict on kernel/ and beat_schedule/)."""

from __future__ import annotations

import ast
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


#: What each package of ours must never import (the layers point one way): the kernel
#: knows no Celery and no other package of ours; Beat's schedule semantics know no
#: celery_app; adapters use only kernel types; only the kernel speaks SQL.
_FORBIDDEN = {
    "kernel": ("celery", "kombu", "celery_app", "beat_schedule", "adapters"),
    "beat_schedule": ("celery_app", "sqlalchemy"),
    "adapters": ("celery_app", "beat_schedule", "sqlalchemy"),
    "celery_app": ("sqlalchemy",),
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_each_layer_imports_only_what_it_may() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for package, refused in _FORBIDDEN.items()
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in sorted(_imports(path))
        if name.split(".")[0] in refused
    ]
    assert offenders == []
