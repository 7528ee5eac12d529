"""Every public ``Kernel`` method refuses a wrong type or an out-of-range value with
``INVALID_ARGUMENT`` naming the argument, before the driver sees it (SQLite and PostgreSQL)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest

from kernel import Kernel
from kernel.errors import InvalidArgument
from kernel.testing import memory_kernel
from tests.kernel.conftest import Harness


def _checked_parameters() -> list[tuple[str, str]]:
    """(method, parameter) for every annotated parameter of every public method."""
    found = []
    for name, member in inspect.getmembers(Kernel, inspect.isfunction):
        if name.startswith("_"):
            continue
        hints = typing.get_type_hints(member)
        found += [
            (name, param)
            for param in inspect.signature(member).parameters
            if param != "self" and hints.get(param, Any) is not Any
        ]
    return found


def test_an_action_result_passed_as_an_occurrence_id_is_refused(k: Harness) -> None:
    k.define()
    answer = k.kernel.run_now("job", request_id="r", operator="op", force=True)
    before = k.kernel.last_event_id()
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.claim(answer, owner="w", lease=30)  # type: ignore[arg-type]
    assert refused.value.field == "occurrence_id"
    assert refused.value.message == "occurrence_id: must be an integer, not ActionResult"
    assert k.kernel.last_event_id() == before
    assert k.kernel.get_occurrence(answer.occurrence.id).status == "queued"


def test_every_method_names_an_argument_of_the_wrong_type() -> None:
    # The refusal comes before any statement, so one in-memory kernel serves every method.
    kernel = memory_kernel()
    unnamed = []
    try:
        for method, param in _checked_parameters():
            with pytest.raises(InvalidArgument) as refused:
                getattr(kernel, method)(**{param: object()})
            if refused.value.field != param:
                unnamed.append((method, param, refused.value.field))
    finally:
        kernel.close()
    assert unnamed == []
    assert len(_checked_parameters()) > 140  # every method, not a few


@pytest.mark.parametrize(
    ("call", "field", "says"),
    [
        (lambda k: k.get_occurrence(2**63), "occurrence_id", "must fit in 64 bits"),
        (lambda k: k.claim(1, owner="w", lease=float("nan")), "lease", "finite"),
        (lambda k: k.get_job("job\x00"), "job_id", "NUL"),
        (lambda k: k.events(limit=True), "limit", "not bool"),
        (lambda k: k.list_occurrences(statuses="queued"), "statuses", "a list of str"),
        (
            lambda k: k.fire(
                "job",
                expected_revision=1,
                expected_cursor=None,
                firings=[("cron:x", "2026-01-01")],
                next_cursor=None,
            ),
            "firings[0][1]",
            "must be a datetime, not str",
        ),
    ],
)
def test_values_the_database_cannot_hold_are_refused(
    kernel: Kernel, call: Any, field: str, says: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        call(kernel)
    assert refused.value.field == field and says in refused.value.message
