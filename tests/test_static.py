"""The static checks we promise: ruff everywhere, mypy (strict on kernel/ and beat_schedule/)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.import_graph import cycles, graph, imported, module_name

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


def test_each_layer_imports_only_what_it_may() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for package, refused in _FORBIDDEN.items()
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in sorted(imported(path))
        if name.split(".")[0] in refused
    ]
    assert offenders == []


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
    WAITING, ACTIVE, UNSETTLED, SETTLED, RESOLVED or FAILED, or
    kernel/statements/predicates.py."""
    from kernel import states

    groups = {
        frozenset(getattr(states, g)): g
        for g in ("CLAIMABLE", "WAITING", "ACTIVE", "UNSETTLED", "SETTLED", "RESOLVED", "FAILED")
    }
    offenders = []
    for path in sorted(p for package in _FORBIDDEN for p in (ROOT / package).rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name == "kernel/states.py" or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                members = frozenset(m for m in map(_status_member, node.elts) if m is not None)
                if members in groups:
                    offenders.append(f"{name}:{node.lineno} spells out {groups[members]}")
    assert offenders == []


# -- the kernel's folders ---------------------------------------------------------------
#
# Dependencies flow down this list and never up: the vocabulary every layer speaks (root
# modules), the database floor, what a user may write, the statements, the transaction
# that runs them and appends its events, the transition table and its door, the readers,
# then the nouns by meaning (limits, occurrences, jobs, upkeep), and the door that
# composes them (the facade, the store; the package itself above all). A new module must
# be placed: in a folder, or at the root by name here.
_KERNEL_LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names.split())
    for names in (
        "errors states events types reports records redaction",
        "db migrations",
        "spec",
        "statements",
        "transaction",
        "transitions",
        "reads follow",
        "limits",
        "occurrences",
        "jobs",
        "upkeep",
        "facade",
        "store testing",
    )
)
#: At most this many modules at the kernel's root and in any one folder (issue 37).
_KERNEL_ROOT_MODULES, _KERNEL_FOLDER_MODULES = 12, 15


def _kernel_layer(module: str) -> int:
    """The position in :data:`_KERNEL_LAYERS` of ``kernel.<folder or root module>...``."""
    top = module.split(".")[1] if "." in module else ""
    if not top:
        return len(_KERNEL_LAYERS)
    for layer, names in enumerate(_KERNEL_LAYERS):
        if top in names:
            return layer
    raise AssertionError(f"kernel module {module} has no place in tests/test_static.py")


def _kernel_imports(path: Path) -> set[str]:
    """The kernel modules ``path`` imports, type-only imports included."""
    return {m for m in imported(path) if m.split(".")[0] == "kernel"}


def test_the_kernel_folders_point_down() -> None:
    offenders = []
    for path in sorted((ROOT / "kernel").rglob("*.py")):
        module = module_name(path)
        layer = _kernel_layer(module)
        for target in sorted(_kernel_imports(path)):
            if _kernel_layer(target) > layer:
                offenders.append(f"{module} imports {target}, a layer above it")
    assert offenders == []


def test_the_kernel_root_and_folders_stay_small() -> None:
    root = ROOT / "kernel"
    assert len(list(root.glob("*.py"))) <= _KERNEL_ROOT_MODULES
    crowded = {
        folder.name: count
        for folder in root.iterdir()
        if folder.is_dir()
        and folder.name != "migrations"
        and (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"]))
        > _KERNEL_FOLDER_MODULES
    }
    assert crowded == {}


#: Lines a kernel module may have: past them it wants splitting by noun (issue 37).
_KERNEL_MODULE_LINES = 400


def test_no_kernel_module_is_past_the_bound() -> None:
    long = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "kernel").rglob("*.py")
        if "migrations" not in path.parts
        and len(path.read_text(encoding="utf-8").splitlines()) > _KERNEL_MODULE_LINES
    }
    assert long == set(), sorted(long)


#: celery_app modules still past the bound, each with why it is not split yet.
_CELERY_APP_LONG = {
    # Being edited in parallel for canvas and enqueue work; split once that lands.
    "celery_app/enqueueing.py",
}


def test_no_celery_app_module_is_past_the_bound() -> None:
    """The Celery glue splits by noun past the kernel's bound too (GUIDE)."""
    long = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "celery_app").rglob("*.py")
        if len(path.read_text(encoding="utf-8").splitlines()) > _KERNEL_MODULE_LINES
    }
    assert long == _CELERY_APP_LONG, sorted(long ^ _CELERY_APP_LONG)


#: The kernel modules the layers above may import: the facade and what its methods take
#: and return (types, errors, states, payloads), the job spec's validation and schema,
#: and the engine's construction. Everything else is the kernel's own.
_PUBLIC_KERNEL = {"kernel"}
#: Imports between our own packages' parts that the layers refuse (importer prefix,
#: refused prefix): the web and the CLI share celery_app/operations, not each other;
#: Beat does not load the worker's task module.
_REFUSED_INSIDE = (
    ("celery_app/web/", "celery_app.cli"),
    ("celery_app/beat/", "celery_app.tasks"),
)


def test_the_layers_above_use_only_the_public_kernel() -> None:
    offenders = []
    for package in ("celery_app", "beat_schedule", "adapters"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            for target in sorted(_kernel_imports(path)):
                if target not in _PUBLIC_KERNEL:
                    offenders.append(f"{name} imports {target}")
            for module in sorted(imported(path)):
                for importer, refused in _REFUSED_INSIDE:
                    if name.startswith(importer) and module.startswith(refused):
                        offenders.append(f"{name} imports {module}")
    assert offenders == []


def test_no_module_of_ours_imports_itself_round() -> None:
    """No import cycle among our modules, whether the import runs on load or inside a
    function (moving an import into a function only hides a cycle until that call):
    a piece two modules share belongs in a module below both. Imports under
    ``if TYPE_CHECKING:`` never run and do not count."""
    assert cycles(graph(reach="run")) == []


# -- one home per name --------------------------------------------------------------------


def _defined_and_imported(tree: ast.Module) -> tuple[list[str], set[str]]:
    """A module's ``__all__`` and the names its top level imports."""
    exported: list[str] = []
    imports: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            assert isinstance(node.value, ast.List | ast.Tuple)
            exported = [ast.literal_eval(element) for element in node.value.elts]
    return exported, imports


def test_a_celery_app_module_exports_only_what_it_defines() -> None:
    """A name has one home: a module of celery_app does not list in ``__all__`` a name it
    imports (a package's ``__init__`` gathers names on purpose and is exempt)."""
    offenders = []
    for path in sorted((ROOT / "celery_app").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        exported, imports = _defined_and_imported(ast.parse(path.read_text(encoding="utf-8")))
        offenders += [f"{path.relative_to(ROOT)} re-exports {n}" for n in exported if n in imports]
    assert offenders == []


def test_messages_to_workers_leave_from_one_module() -> None:
    """Every Celery message the kernel's glue sends a worker is sent by celery_app/hints.py."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "celery_app").rglob("*.py"))
        if path.name != "hints.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "send_task"
    ]
    assert offenders == []


def test_an_occurrence_id_is_called_occurrence_id() -> None:
    """One name per concept from the CLI down to the SQL: no ``occ_id`` beside ``occurrence_id``."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in ("kernel", "celery_app", "beat_schedule", "adapters")
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.Name) and node.id == "occ_id")
        or (isinstance(node, ast.arg) and node.arg == "occ_id")
    ]
    assert offenders == []
