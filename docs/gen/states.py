"""The state diagrams, in Mermaid, and the reference tables, from the kernel's transition
table (kernel/transitions/occurrences.py).

The README carries the occurrence diagram too; tests/test_docs.py checks that it is this
output. Print it with ``python -m docs.gen.states``.
"""

from __future__ import annotations

from collections.abc import Iterable

from kernel.transitions.limits import RATE_TRANSITIONS
from kernel.transitions.occurrences import (
    BUDGET_TRANSITIONS,
    CONTROL_TRANSITIONS,
    JOB_SOURCE_TRANSITIONS,
    JOB_TRANSITIONS,
    OCCURRENCE_TRANSITIONS,
    POOL_TRANSITIONS,
    Transition,
    statement_name,
)

__all__ = ["occurrence_diagram", "control_diagram", "job_diagram", "states_page"]

#: The table's name for "no row" (a creation, a control row not made yet, a deletion).
_NO_ROW = "none"


def _diagram(transitions: Iterable[Transition]) -> str:
    """A ``stateDiagram-v2``: one arrow per change of state (from, to), labelled with every
    trigger that makes it, in the table's order. A row that may leave the state as it was
    (a renewal, a reclaim under a new fence, a cancel request) is not drawn as a loop:
    the tables list it, and the loops hid the arrows."""
    triggers: dict[tuple[str, str], list[str]] = {}
    for transition in transitions:
        for source in transition.from_states:
            for target in transition.to_states:
                if source == target:
                    continue
                labels = triggers.setdefault((str(source), str(target)), [])
                if transition.trigger not in labels:
                    labels.append(transition.trigger)
    lines = ["stateDiagram-v2"]
    for (source, target), labels in triggers.items():
        start = "[*]" if source == _NO_ROW else source
        # A colon or semicolon would end Mermaid's label: triggers are joined by line breaks.
        label = "<br/>".join(labels).replace(":", " -").replace(";", ",")
        end = "[*]" if target == _NO_ROW else target
        lines.append(f"    {start} --> {end} : {label}")
    return "\n".join(lines) + "\n"


def occurrence_diagram() -> str:
    """The occurrence statuses and every transition between them."""
    return _diagram(OCCURRENCE_TRANSITIONS)


def control_diagram() -> str:
    """The runtime-control states (pause, resume, hand back) of a running occurrence."""
    return _diagram(CONTROL_TRANSITIONS)


def job_diagram() -> str:
    """A job's life: defined, enabled and disabled, deleted."""
    return _diagram(JOB_TRANSITIONS)


def _fenced(diagram: str) -> str:
    return f"```mermaid\n{diagram}```\n"


def _table(transitions: Iterable[Transition]) -> str:
    rows = [
        "| from | trigger | to | statement | guard | events |",
        "|---|---|---|---|---|---|",
    ]
    for t in transitions:
        cells = (
            ", ".join(f"`{s}`" for s in t.from_states),
            t.trigger,
            ", ".join(f"`{s}`" for s in t.to_states),
            f"`{statement_name(t)}`",
            t.guard.replace("|", "\\|"),
            ", ".join(f"`{e}`" for e in t.events) or "—",
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def states_page() -> str:
    """The reference page: the diagrams of occurrences, controls and jobs, and every
    row of the table."""
    return "\n".join(
        [
            "# States and transitions",
            "",
            "Generated from the kernel's transition table",
            "(`kernel/transitions/occurrences.py`), the",
            "one place the kernel's behaviour lives: each row is one guarded statement in",
            "`kernel.statements`, and the kernel appends an event a row lists only in a",
            "transaction that ran a row listing it.",
            "",
            "## Occurrences",
            "",
            "`[*]` is an occurrence not made yet. Rows that keep the status (a renewal, a",
            "reclaim under a new fence, a cancel request, an adapter asked, a resume) are in",
            "the table, not drawn. A paused occurrence is stored as",
            "`retry_wait` with its runtime control `paused`; the CLI, the console, the API",
            "and the exporter call it `paused`.",
            "",
            _fenced(occurrence_diagram()),
            _table(OCCURRENCE_TRANSITIONS),
            "## Runtime controls",
            "",
            "A running occurrence's pause, resume and warm hand back; `[*]` is no control",
            "row yet.",
            "",
            _fenced(control_diagram()),
            _table(CONTROL_TRANSITIONS),
            "## Jobs",
            "",
            "`[*]` is no job of this id (not defined yet, or deleted). Beat planning and",
            "advancing an enabled job's fire cursor keeps it enabled: those rows are in the",
            "table, not drawn.",
            "",
            _fenced(job_diagram()),
            _table(JOB_TRANSITIONS),
            "### Job sources",
            "",
            "Which source (a job file, the app's `beat_schedule`) owns a job: `none` (no",
            "record), `owned`, or `retired` (the source no longer lists it: the job rows",
            "`SOURCE_RETIRES_JOB` and `SOURCE_RESTORES_JOB` move it between the two).",
            "",
            _table(JOB_SOURCE_TRANSITIONS),
            "## Pools",
            "",
            "A pool's state is its counter of running slots: a row names the condition its",
            "guard decides, `room` (running below the limit) or `full`; `none` is no pool",
            "row yet.",
            "",
            _table(POOL_TRANSITIONS),
            "## Rate limits",
            "",
            "A rate limit's state is when its next token is free: `free` (that time has",
            "come) or `taken`; `none` is no row yet.",
            "",
            _table(RATE_TRANSITIONS),
            "## Budgets",
            "",
            "A budget window's state is its counters: a row names the condition, `room` for",
            "one more reservation under the budget's limits or `spent`; a reservation is",
            "`held` (counted) or `released`; a shared budget is `defined`; `none` is no row",
            "yet.",
            "",
            _table(BUDGET_TRANSITIONS),
        ]
    )


if __name__ == "__main__":
    print(_fenced(occurrence_diagram()), end="")
