"""The project's import graph: which of its modules import which when they are loaded.

    python -m tests.import_graph [PACKAGE ...] [--json] [--reach run]

prints, per package (default: all four), its module count, its import arrows (the
module-level imports from its modules to modules of the project; ``within`` counts
those that stay in the package), the longest import chain inside the package (how
many modules deep a reader follows it), and its import cycles. An import inside a
function or under ``if TYPE_CHECKING:`` is not an arrow: it does not run on load. A
module is a ``.py`` file; a package's ``__init__.py`` is the package itself. The
chain is counted on the graph with each cycle collapsed into one step. ``--reach run``
draws the imports inside functions too: the cycles tests/test_static.py refuses.

tests/test_static.py reads imports through :func:`imported` too: one parser.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernel", "celery_app", "beat_schedule", "adapters")

__all__ = [
    "PACKAGES",
    "ROOT",
    "Reach",
    "cycles",
    "figures",
    "graph",
    "imported",
    "longest_chain",
    "module_name",
]


def module_name(path: Path) -> str:
    """``kernel/statements/jobs.py`` -> ``kernel.statements.jobs``; a package's
    ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _is_module(name: str) -> bool:
    """Whether ``name`` is a module of the project (a file or a package)."""
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _running(node: ast.AST, functions: bool) -> Iterator[ast.AST]:
    """The nodes that may run: not the body of ``if TYPE_CHECKING:``, and function bodies
    only with ``functions``."""
    for child in ast.iter_child_nodes(node):
        if not functions and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for each in child.orelse:
                yield each
                yield from _running(each, functions)
            continue
        yield child
        yield from _running(child, functions)


#: Which imports :func:`imported` reads: those that run when the module loads (the
#: graph's arrows), those that may run at all (on load or in a function; not under
#: ``if TYPE_CHECKING:``), or every one written.
Reach = Literal["load", "run", "written"]


def imported(path: Path, reach: Reach = "written") -> set[str]:
    """The modules ``path`` imports, by full name: ``from kernel import runs`` names
    ``kernel.occurrences.runs``, ``from kernel import Kernel`` names ``kernel``; a module outside
    the project by the name written."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    nodes = ast.walk(tree) if reach == "written" else _running(tree, reach == "run")
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if _is_module(sub) else base)
    return found


def _paths(packages: Iterable[str]) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def graph(packages: Sequence[str] = PACKAGES, reach: Reach = "load") -> dict[str, set[str]]:
    """Each module of ``packages`` -> the modules of the project it imports (``reach``)."""
    return {
        module_name(path): {
            m for m in imported(path, reach) if m.split(".")[0] in PACKAGES and _is_module(m)
        }
        for path in _paths(packages)
    }


def _components(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each sorted; importers before imported."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep chain cannot reach Python's recursion limit.
        work = [(start, iter(sorted(arrows.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(arrows.get(target, ())))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    found.append(sorted(component))

    for module in sorted(arrows):
        if module not in index:
            visit(module)
    return found[::-1]


def cycles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each group of modules that import each other, round."""
    return [
        group
        for group in _components(arrows)
        if len(group) > 1 or group[0] in arrows.get(group[0], ())
    ]


def longest_chain(arrows: dict[str, set[str]]) -> list[str]:
    """The longest import chain, a cycle counted as one step (shown ``a | b``)."""
    groups = _components(arrows)
    group_of = {m: i for i, group in enumerate(groups) for m in group}
    below: dict[int, list[int]] = {}  # a group's longest chain, itself first
    # Tarjan lists a group after every group it imports: compute the imported first.
    for i in reversed(range(len(groups))):
        targets = {group_of[t] for m in groups[i] for t in arrows.get(m, ()) if t in group_of}
        targets.discard(i)
        best = max((below[t] for t in targets), key=len, default=[])
        below[i] = [i, *best]
    chain = max(below.values(), key=len, default=[])
    return [" | ".join(groups[i]) for i in chain]


def figures(packages: Sequence[str], reach: Reach = "load") -> dict[str, Any]:
    """Per package: modules, arrows (and ``within`` the package), longest chain, cycles."""
    arrows = graph(PACKAGES, reach)
    result: dict[str, Any] = {}
    for package in packages:
        own = {m: t for m, t in arrows.items() if m.split(".")[0] == package}
        inside = {m: {t for t in t_ if t in own} for m, t_ in own.items()}
        chain = longest_chain(inside)
        result[package] = {
            "modules": len(own),
            "arrows": sum(len(t) for t in own.values()),
            "within": sum(len(t) for t in inside.values()),
            "longest_chain": {"length": len(chain), "modules": chain},
            "cycles": cycles(inside),
        }
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.import_graph",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("packages", nargs="*", metavar="PACKAGE", help="default: all four")
    parser.add_argument("--json", action="store_true", help="one JSON object, by package")
    parser.add_argument(
        "--reach",
        choices=("load", "run"),
        default="load",
        help="arrows of the imports that run on load (default), or of every import that "
        "may run, inside functions too (the cycles test_static refuses)",
    )
    args = parser.parse_args(argv)
    unknown = [p for p in args.packages if p not in PACKAGES]
    if unknown:
        parser.error(f"not a package of the project: {', '.join(unknown)}")
    found = figures(args.packages or PACKAGES, args.reach)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for package, f in found.items():
        chain = f["longest_chain"]
        print(
            f"{package}: {f['modules']} modules, {f['arrows']} import arrows "
            f"({f['within']} within), longest chain {chain['length']} modules, "
            f"{len(f['cycles'])} cycles"
        )
        print("  chain: " + " -> ".join(chain["modules"]))
        for group in f["cycles"]:
            print("  cycle: " + " <-> ".join(group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
