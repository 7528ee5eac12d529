"""An editor follows the worker's and Beat's calls into the kernel to the code that runs
them: go-to-definition (jedi, as editors use it) on ``kernel.succeed_and_claim(...)`` in
celery_app lands on the facade's method, the method's body on the function that does
the work, and the signature shown is the method's. A facade that
forwarded through ``_write(fn, *args)`` or an untyped decorator loses the call here."""

from __future__ import annotations

import inspect
from pathlib import Path

import jedi
import pytest

from kernel import Kernel

ROOT = Path(__file__).resolve().parent.parent.parent
PROJECT = jedi.Project(ROOT)

#: (caller, call as written there, facade module, module whose function runs it, returned type)
CALLS = [
    (
        "celery_app/runtime.py",
        "kernel.succeed_and_claim(",
        "kernel/facade/workers.py",
        "claiming",
        "Claim",
    ),
    (
        "celery_app/beat/firings.py",
        "kernel.fire(",
        "kernel/facade/beat.py",
        "job_ops",
        "FireReport",
    ),
]


def _position(path: Path, text: str) -> tuple[int, int]:
    """Line and column of the first ``text`` in ``path``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return number, line.index(text)
    raise AssertionError(f"{path}: {text!r} not found")


def _script(path: Path) -> jedi.Script:
    return jedi.Script(path.read_text(encoding="utf-8"), path=path, project=PROJECT)


@pytest.mark.parametrize(("caller", "call", "facade", "runner", "returned"), CALLS)
def test_go_to_definition_follows_the_call_to_the_code_that_runs_it(
    caller: str, call: str, facade: str, runner: str, returned: str
) -> None:
    method = call.removeprefix("kernel.").removesuffix("(")
    line, column = _position(ROOT / caller, call)
    column += len("kernel.")
    script = _script(ROOT / caller)

    (definition,) = script.goto(line, column, follow_imports=True)
    assert (definition.module_path, definition.name) == (ROOT / facade, method)

    # The method's body calls the function that does the work, and jedi follows it too.
    body_call = f"return {runner}.{method}("
    body_line, body_column = _position(ROOT / facade, body_call)
    assert body_line > definition.line
    (work,) = _script(ROOT / facade).goto(
        body_line, body_column + len(f"return {runner}."), follow_imports=True
    )
    assert work.name == method and work.module_path.parts[-3] == "kernel"
    assert work.module_path != ROOT / facade

    # The signature an editor shows names the method's public parameters, in order, and
    # its return type.
    (signature,) = script.get_signatures(line, column + len(method) + 1)
    assert signature.to_string().endswith(returned + " | None" if returned == "Claim" else returned)
    public = list(inspect.signature(getattr(Kernel, method)).parameters)
    assert [p.name for p in signature.params if p.name not in ("self", "tx")] == public[1:]


def test_go_to_definition_follows_the_worker_lane_to_the_code_that_runs_it() -> None:
    """The runtime's claim goes through ``Kernel.worker_lane``: its method, and in its
    body the function it runs in its transaction."""
    caller, call = ROOT / "celery_app/runtime.py", "kernel.worker_lane.claim("
    line, column = _position(caller, call)
    script = _script(caller)
    (definition,) = script.goto(line, column + len("kernel.worker_lane."), follow_imports=True)
    facade = ROOT / "kernel/facade/workers.py"
    assert (definition.module_path, definition.name) == (facade, "claim")
    body_line, body_column = _position(facade, "run_write(self._kernel, claiming.claim,")
    assert body_line > definition.line
    (work,) = _script(facade).goto(
        body_line, body_column + len("run_write(self._kernel, claiming."), follow_imports=True
    )
    assert (work.module_path, work.name) == (ROOT / "kernel/occurrences/claiming.py", "claim")
    (signature,) = script.get_signatures(line, column + len(call))
    assert signature.to_string().endswith("Claim | None")
    assert [p.name for p in signature.params if p.name != "self"] == ["occurrence_id", "owner"]
