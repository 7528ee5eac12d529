"""Fuzz the HTTP API from its own OpenAPI document (schemathesis): never a 500.

The document is fetched from the running server's ``/openapi.json``, so the fuzz
follows the contract exactly as clients see it. Requests carry the admin token, so
every action is really attempted against a kernel holding jobs and occurrences in
several states; the examples per operation are bounded to keep the run short.
"""

from __future__ import annotations

import uuid

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


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_answers_every_request_without_a_server_error(
    web: Web, mode: GenerationMode
) -> None:
    _arrange(web)
    schema = schemathesis.openapi.from_url(f"{web.url}/openapi.json")
    headers = {"Authorization": f"Bearer {web.tokens['admin']}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=8,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def exchange(case: schemathesis.Case) -> None:
            response = case.call(headers=headers)
            case.validate_response(response, checks=_CHECKS)
            if response.status_code >= 400:
                error = response.json()["error"]
                assert error["code"] and error["message"], response.text

        exchange()
