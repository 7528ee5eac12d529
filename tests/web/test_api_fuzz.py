"""Fuzz the HTTP API from its own OpenAPI document (schemathesis): never a 500.

The document is fetched from the running server's ``/openapi.json``, so the fuzz
follows the contract exactly as clients see it. Requests carry the admin token, so
every action is really attempted against a kernel holding jobs and occurrences in
several states. Each operation gets its own examples (valid and invalid input), then a
stateful run chains operations along the links schemathesis infers (a job listed, then
previewed, run now, its occurrence paused ...).

The suite's budget is about a minute: ``KERNEL_FUZZ_EXAMPLES`` (default 40, enough to
find an out-of-range date in ``/why``, issue 24) valid examples per operation, a quarter
as many invalid ones, and an eighth as many stateful runs of up to 10 calls. A longer
fuzz is the same test with more (about ten minutes on two cores)::

    KERNEL_FUZZ_EXAMPLES=400 .venv/bin/python -m pytest -p no:randomly --timeout 0 -s \\
        tests/web/test_api_fuzz.py

Without KERNEL_FUZZ_EXAMPLES the examples are derandomized: the suite sees the same cases
each run; with it, each run draws new ones.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from web.support import Web

_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Set, it also draws new examples each run; unset, the suite sees the same ones each time.
EXAMPLES = int(os.environ.get("KERNEL_FUZZ_EXAMPLES", "40"))
_SETTINGS = settings(
    deadline=None,
    database=None,
    derandomize="KERNEL_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=list(HealthCheck),
)


def _arrange(web: Web) -> None:
    """Jobs with running and queued occurrences, so actions meet real state."""
    kernel = web.kernel
    for _ in range(3):
        job = web.fresh_job()
        running = kernel.run_now(
            job, request_id=uuid.uuid4().hex, operator="t", force=True
        ).occurrence.id
        kernel.claim(running, owner="w1", lease=600)
        kernel.run_now(job, request_id=uuid.uuid4().hex, operator="t", force=True)


def _check(response: Any, case: schemathesis.Case) -> None:
    case.validate_response(response, checks=_CHECKS)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["code"] and error["message"], response.text


@pytest.fixture(scope="module")
def schema(web: Web) -> Any:
    _arrange(web)
    return schemathesis.openapi.from_url(f"{web.url}/openapi.json")


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("mode", "examples"),
    [(GenerationMode.POSITIVE, EXAMPLES), (GenerationMode.NEGATIVE, max(EXAMPLES // 4, 2))],
    ids=["positive", "negative"],
)
def test_every_operation_answers_without_a_server_error(
    web: Web, schema: Any, mode: GenerationMode, examples: int
) -> None:
    headers = {"Authorization": f"Bearer {web.tokens['admin']}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    cases = 0
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(_SETTINGS, max_examples=examples)
        def exchange(case: schemathesis.Case) -> None:
            nonlocal cases
            cases += 1
            _check(case.call(headers=headers), case)

        exchange()
    print(f"{mode.value}: {len(operations)} operations, {cases} cases, no failure")


@pytest.mark.timeout(600)
def test_chained_operations_answer_without_a_server_error(web: Web, schema: Any) -> None:
    headers = {"Authorization": f"Bearer {web.tokens['admin']}"}
    machine = schema.as_state_machine()
    declared = _declared_links(httpx.get(f"{web.url}/openapi.json").json())
    assert declared >= 100, f"the document declares {declared} links"
    calls = inferred = 0
    # Calls made with a value a declared link took from an earlier answer, per link.
    chained: Counter[str] = Counter()

    class Operator(machine):  # type: ignore[misc, valid-type]
        def step(self, input: Any) -> Any:
            nonlocal calls, inferred
            calls += 1
            link = input.transition
            if link is not None and input.applied_parameters:
                if link.is_inferred:
                    inferred += 1
                else:
                    chained[link.id] += 1
            return super().step(input)

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"headers": headers}

        def validate_response(self, response: Any, case: schemathesis.Case, **kwargs: Any) -> None:
            _check(response, case)

    runs = max(EXAMPLES // 8, 3)
    Operator.run(settings=settings(_SETTINGS, max_examples=runs, stateful_step_count=10))
    print(
        f"stateful: {runs} runs, {calls} calls; {sum(chained.values())} chained along "
        f"{len(chained)} of the {declared} declared links, {inferred} along inferred ones; "
        "no failure"
    )
    # Before the document declared links, no call was chained (the 32 inferred links
    # extracted nothing from these answers).
    assert len(chained) >= 5, chained


def _declared_links(document: dict[str, Any]) -> int:
    """How many links the document declares on its operations' answers."""
    return sum(
        len(answer.get("links", {}))
        for operations in document["paths"].values()
        for operation in operations.values()
        for answer in operation.get("responses", {}).values()
    )
