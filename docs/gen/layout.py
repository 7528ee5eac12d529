"""The contributing guide's "Where to find what": the kernel's root modules and folders,
each with the first sentence of its docstring and the modules a folder holds
(tests/test_static.py holds the order their imports point in).

docs/development.md carries this output; tests/test_docs.py checks that it does. Print it
with ``python -m docs.gen.layout``.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["where_to_find_what"]

_KERNEL = Path(__file__).resolve().parents[2] / "kernel"


def _summary(path: Path) -> str:
    """The first sentence of the module's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".") + "."


def where_to_find_what() -> str:
    """A Markdown list: each folder (with its modules) and root module of ``kernel/``."""
    lines = []
    for path in sorted(_KERNEL.iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            modules = sorted(p.stem for p in path.glob("*.py") if p.name != "__init__.py")
            listed = f" ({', '.join(modules)})" if path.name != "migrations" else ""
            lines.append(f"- `kernel/{path.name}/`: {_summary(path / '__init__.py')}{listed}")
        elif path.suffix == ".py" and path.name != "__init__.py":
            lines.append(f"- `kernel/{path.name}`: {_summary(path)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(where_to_find_what(), end="")
