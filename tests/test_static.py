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


#: Files that still spell a named status group out, to be switched to kernel.states'
#: groups by the hot-path change that owns them (claim and settle statements).
_LOCAL_GROUPS_LEFT = {
    "kernel/claiming.py",
    "kernel/statements/claims.py",
    "kernel/statements/worker.py",
}


def _status_member(node: ast.AST) -> str | None:
    """The status a literal element names: ``S.QUEUED``, ``"queued"``, ``sa.literal("queued")``."""
    from kernel.states import OccurrenceStatus

    if isinstance(node, ast.Attribute) and node.attr in OccurrenceStatus.__members__:
        return node.attr.lower()
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    if isinstance(node, ast.Constant) and node.value in set(OccurrenceStatus):
        return str(node.value)
    return None


def test_status_groups_are_named_once() -> None:
    """A literal of the statuses of a named group outside kernel/states.py is a copy that
    drifts (ours forgot needs_adjudication and awaiting_approval): use CLAIMABLE,
    WAITING, ACTIVE, UNSETTLED or SETTLED, or kernel/statements/predicates.py."""
    from kernel import states

    groups = {
        frozenset(getattr(states, g)): g
        for g in ("CLAIMABLE", "WAITING", "ACTIVE", "UNSETTLED", "SETTLED")
    }
    offenders = []
    for path in sorted((ROOT / "kernel").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name == "kernel/states.py" or name in _LOCAL_GROUPS_LEFT or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                members = frozenset(m for m in map(_status_member, node.elts) if m is not None)
                if members in groups:
                    offenders.append(f"{name}:{node.lineno} spells out {groups[members]}")
    assert offenders == []
