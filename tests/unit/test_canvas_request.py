"""What a routed chain's runs carry of Celery's request (issue 40), in process on real
SQLite and Celery's in-memory result backend: each step's ``root_id``/``parent_id`` and
the ids of the steps after it, and a run the kernel ended (an owed end) writing its
failure under those later ids too, as Celery's backend fails a chain."""

from __future__ import annotations

from typing import Any

from celery import chain, states

from celery_app.enqueueing import RunFailed
from celery_app.task_results import store_end
from tests.unit.test_routed_options import _by_key, _occurrences, _settle, routed_app

__all__ = ["routed_app"]  # the fixture, shared


def test_a_chain_s_steps_carry_their_lineage_and_the_steps_after_them(routed_app: Any) -> None:
    app = routed_app
    steps = [app.routed.s("a"), app.other.s(), app.other.si("last")]
    answer = chain(*steps).apply_async()
    [first] = _occurrences(app)
    root = first.trigger_key.removeprefix("key:")
    second_id = answer.parent.id
    # The first step is the root (its own id, as Celery's message names it); the later
    # ones name it.
    assert first.payload["request"] == {"chain": [second_id, answer.id]}
    _settle(app, first.id, "A")
    second = _by_key(app, second_id)
    assert second.payload["request"] == {"root_id": root, "parent_id": root, "chain": [answer.id]}
    _settle(app, second.id, "B")
    assert _by_key(app, answer.id).payload["request"] == {"root_id": root, "parent_id": second_id}


def test_a_run_ended_by_the_kernel_fails_the_chain_s_later_steps_too(routed_app: Any) -> None:
    app = routed_app
    app.conf.result_backend = "cache+memory://"
    payload = {"task": app.routed.name, "request": {"chain": ["b-1", "c-1"]}}
    body = {"trigger_key": "key:a-1", "status": "dead_letter", "occurrence_id": 7,
            "error": {"code": "LEASE_LOST", "message": "the worker died"}}  # fmt: skip
    assert store_end(app, payload, body)
    for task_id in ("a-1", "b-1", "c-1"):
        result = app.AsyncResult(task_id)
        assert result.state == states.FAILURE
        assert isinstance(result.result, RunFailed) and "LEASE_LOST" in str(result.result)
