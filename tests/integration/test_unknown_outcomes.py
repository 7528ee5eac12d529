"""At-most-once means at most once when a run times out (issue 23): a real worker and Beat.

An http charge whose server answers after the job's timeout, and a shell command killed
by its timeout, are each run once: the run settles in ``needs_adjudication`` (not
``retry_wait``), the adapter is asked, and its lookup settles what it can tell. The remote
side is :class:`integration.remote.Remote`, answering a charge after the job's timeout.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from integration.remote import Remote
from integration.stack import Stack
from servers import serving

from adapters.http import HttpAdapter
from celery_app.held_run import LeaseKeeper
from celery_app.runtime import run_occurrence
from kernel import Kernel

#: The server answers a charge this long after it came: past the job's timeout (2 s).
ANSWER_AFTER_S = 8.0


@pytest.fixture
def slow() -> Iterator[Remote]:
    """A remote that answers a charge ``ANSWER_AFTER_S`` after it came."""
    with serving(Remote(answer_after=ANSWER_AFTER_S)) as server:
        yield server
        server.release.set()


def _once(stack: Stack, job_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """An at-most-once job that would retry within a second if it were retried."""
    return {
        "id": job_id,
        "kind": kind,
        "queue": stack.queue,
        "delivery": "at-most-once",
        "timeout": "2s",
        "max_attempts": 3,
        "retry": {"backoff": "1s", "factor": 1, "max": "1s", "jitter": 0},
        "payload": payload,
    }


def _types(stack: Stack, occ_id: int) -> list[str]:
    return [t for t, _ in stack.event_types(occ_id)]


@pytest.mark.parametrize("stack", ["embedded", "redis+postgres"], indirect=True)
def test_a_timed_out_at_most_once_run_is_sent_once_and_adjudicated(
    stack: Stack, slow: Remote
) -> None:
    starts = stack.root / "starts.txt"
    script = f"open({str(starts)!r}, 'a').write('start\\n'); import time; time.sleep(30)"
    stack.use_jobs(
        _once(
            stack,
            "charge-told",
            "http",
            {
                "url": f"{slow.url}/charge",
                "json": {"amount": 5},
                "lookup": {"url": f"{slow.url}/lookup/200"},
            },
        ),
        _once(stack, "charge-unsure", "http", {"url": f"{slow.url}/charge", "json": {"n": 1}}),
        _once(stack, "script", "shell", {"argv": [sys.executable, "-c", script]}),
    )
    stack.start_beat("beat")
    stack.start_worker("worker", concurrency=3)
    told, unsure, shell = (stack.run_now(j) for j in ("charge-told", "charge-unsure", "script"))

    # The lookup answers 200: the adapter settles it, no operator needed.
    stack.wait(lambda: stack.occurrence(told).status.value == "succeeded", timeout=30, what="told")
    for occ_id in (unsure, shell):
        stack.wait(
            lambda occ_id=occ_id: "occurrence_adapter_cannot_tell" in _types(stack, occ_id),
            timeout=30,
            what=f"{occ_id}: the adapter could not tell",
        )
    # Long enough for the retries a retryable TIMEOUT would have had (backoff 1 s).
    time.sleep(3)
    for occ_id in (told, unsure, shell):
        occurrence = stack.occurrence(occ_id)
        assert occurrence.attempt == 1, f"{occ_id} ran {occurrence.attempt} times"
        assert occurrence.last_error is not None and occurrence.last_error["code"] == "TIMEOUT"
        assert "occurrence_retry_wait" not in _types(stack, occ_id)
    assert stack.occurrence(unsure).status.value == "needs_adjudication"
    assert stack.occurrence(shell).status.value == "needs_adjudication"
    assert sorted(slow.seen("POST", "/charge")) == sorted([str(told), str(unsure)])
    assert slow.seen("GET", "/lookup/200") == [str(told)]
    assert starts.read_text() == "start\n"
    [needs] = [
        e for e in stack.kernel.events(occurrence_id=told) if e.type.endswith("adjudication")
    ]
    assert needs.data["reason"] == "unknown_outcome"


@pytest.fixture
def kernel(kernel_url: str) -> Iterator[Kernel]:
    opened = Kernel.open(kernel_url, migrate_schema=True)
    yield opened
    opened.close()


def test_the_worker_asks_the_adapter_as_soon_as_it_settles(kernel: Kernel, slow: Remote) -> None:
    """No Beat: the worker that settled the unknown outcome asks the lookup itself."""
    kernel.define_job(
        {
            "id": "charge",
            "kind": "http",
            "delivery": "at-most-once",
            "timeout": "1s",
            "max_attempts": 3,
            "payload": {
                "url": f"{slow.url}/charge",
                "json": {"amount": 5},
                "lookup": {"url": f"{slow.url}/lookup/404"},
            },
        }
    )
    occ_id = kernel.run_now("charge", request_id="r1", operator="ops").occurrence.id

    outcome = run_occurrence(
        kernel, {"http": HttpAdapter()}, occ_id, main_pid=os.getpid(), keeper=LeaseKeeper()
    )

    assert (outcome.status, outcome.error_code) == ("needs_adjudication", "TIMEOUT")
    # The lookup said 404 (not applied): runnable again, its attempt given back.
    assert kernel.get_occurrence(occ_id).status.value == "retry_wait"
    types = [e.type for e in kernel.events(occurrence_id=occ_id) if e.type != "run_output"]
    assert types == [
        "occurrence_created",
        "job_run_now",
        "occurrence_claimed",
        "occurrence_needs_adjudication",
        "occurrence_adapter_asked",
        "occurrence_adjudicated",
    ]
    assert slow.seen("POST", "/charge") == [str(occ_id)]
    assert slow.seen("GET", "/lookup/404") == [str(occ_id)]
    again = kernel.claim(occ_id, owner="w2", lease=30)
    assert again is not None and again.occurrence.attempt == 1
