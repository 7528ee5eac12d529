"""An occurrence's definition read from its row: the same value and types as a parse of its
JSON every time, an object of its own for each occurrence, and the JSON parsed once per job
revision while its text stays the same (kernel/records.py ``_definition``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernel import records
from kernel.records import dumps, occurrence_from_mapping

NOW = 1_796_594_389_123


def _row(definition: Any, *, revision: int = 1) -> dict[str, Any]:
    text = definition if isinstance(definition, str) else dumps(definition)
    return {
        "id": 1, "job_id": "job", "job_revision": revision, "trigger_key": "manual:x",
        "scheduled_for": NOW, "status": "running", "attempt": 1, "max_attempts": 3, "fence": 1,
        "lease_owner": "host:1:ab", "lease_expires_at": NOW + 60_000, "available_at": NOW,
        "dispatched_at": NOW, "definition": text, "last_error": None, "result": None,
        "skip_reason": None, "cancel_requested": False, "created_at": NOW, "updated_at": NOW,
        "settled_at": None, "checkpoint": None, "approval_due_at": None, "expires_at": None,
    }  # fmt: skip


def _shape(value: Any) -> Any:
    """``value`` with the type of every part spelled out (``1 == 1.0 == True`` hides them)."""
    if isinstance(value, dict):
        return ("dict", [(k, _shape(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_shape(v) for v in value])
    return (type(value).__name__, repr(value))


DEFINITIONS = [
    {"kind": "callable", "queue": "q", "lease": 60.0, "kill_grace": 2,
     "payload": {"callable": "m:f", "args": [1, 1.0, True, None, "é ☃ \u0000"],
                 "kwargs": {"big": 2**80, "neg": -0.0, "tiny": 5e-324, "nested": [[{"a": []}]]}},
     "z": 1, "a": 2},
    '{"kind":"task","payload":{"k":1,"k":2},"x":NaN,"y":Infinity,"e":1e400}',
]  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    records._DEFINITIONS.clear()


@pytest.mark.parametrize("definition", DEFINITIONS, ids=["types", "json-oddities"])
def test_every_read_gives_what_parsing_the_json_gives(definition: Any) -> None:
    row = _row(definition)
    expected = _shape(json.loads(row["definition"]))
    for _ in range(4):  # the first read, the second (kept), and reads of what was kept
        assert _shape(occurrence_from_mapping(row).definition) == expected


def test_each_occurrence_gets_a_definition_of_its_own() -> None:
    row = _row(DEFINITIONS[0])
    reads = [occurrence_from_mapping(row) for _ in range(4)]
    # Job code changes its run's definition in place; no later run sees it.
    for occurrence in reads:
        occurrence.definition["payload"]["args"].append("changed")
        occurrence.definition["payload"]["kwargs"]["nested"][0][0]["a"].append(1)
        occurrence.definition["kind"] = "changed"
    again = occurrence_from_mapping(row)
    assert again.definition == json.loads(row["definition"])
    assert len({id(o.definition) for o in [*reads, again]}) == 5


def test_a_job_revisions_definition_is_parsed_once_while_its_text_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    real = json.loads

    def counting(text: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(records.json, "loads", counting)
    same = _row(DEFINITIONS[0])
    for _ in range(5):
        occurrence_from_mapping(same)
    # Fails before: the definition was parsed on every read.
    assert parsed == [same["definition"]] * 2
    # An ad hoc run's own arguments: another text under the same revision is parsed, and
    # so is another revision's.
    other_args = _row({**DEFINITIONS[0], "payload": {"callable": "m:f", "args": [2]}})
    assert occurrence_from_mapping(other_args).definition["payload"]["args"] == [2]
    assert occurrence_from_mapping(_row(DEFINITIONS[0], revision=2)).definition["z"] == 1
    assert len(parsed) == 4
