"""A batch's runs through ``celery_app.enqueue_many`` (issue 42 item 2): what Celery's router
decides by a task's name alone is asked once a batch, and every run still takes the queue
stock Celery's router picks for it (a router function is asked per run)."""

from __future__ import annotations

from typing import Any

import pytest

from celery_app import enqueue_many
from tests.unit.test_queue_routing import (  # noqa: F401  (fixtures)
    CALLS,
    ROUTES,
    _app,
    _kernel_queues,
    _stock_queue,
    published,
    url,
)

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")


@pytest.mark.parametrize("routes", ROUTES, ids=list(ROUTES))
def test_a_batch_takes_the_queue_celerys_router_picks_for_each_run(
    routes: str,
    published: list[str],  # noqa: F811
    url: str,  # noqa: F811
) -> None:
    stock = [_stock_queue(ROUTES[routes], published, t, a, o) for t, a, o in CALLS]
    app = _app(ROUTES[routes], url)
    enqueue_many(app, [{"task": t, "args": a, "queue": o.get("queue")} for t, a, o in CALLS])
    assert _kernel_queues(url) == stock


def _asked(app: Any) -> list[str]:
    """The tasks Celery's router is asked about from now on (the real router), but for
    the kernel's own hint messages."""
    router, asked = app.amqp.router, []
    route = router.route

    def counted(options: Any, name: str, *rest: Any, **kw: Any) -> Any:
        if not name.startswith("kernel."):
            asked.append(name)
        return route(options, name, *rest, **kw)

    router.route = counted
    return asked


@pytest.mark.parametrize("routes", ["none", "map", "glob", "regex"])
def test_a_route_by_name_is_asked_once_a_batch(routes: str, url: str) -> None:  # noqa: F811
    app = _app(ROUTES[routes], url)
    asked = _asked(app)
    enqueue_many(app, [{"task": "rt.plain", "args": [str(i)]} for i in range(20)])
    assert asked == ["rt.plain"]


def test_a_router_function_is_asked_for_every_run(url: str) -> None:  # noqa: F811
    app = _app(ROUTES["function"], url)
    asked = _asked(app)
    enqueue_many(app, [{"task": "rt.plain", "args": ["vip" if i % 2 else "a"]} for i in range(6)])
    assert asked == ["rt.plain"] * 6
    assert _kernel_queues(url) == ["after-fn", "fn-vip"] * 3


@pytest.mark.parametrize(
    ("request_fields", "queue", "timeout"),
    [(None, "celery", None), ('{"argsrepr":"(1,)"}', "q.2", 12.5), (None, "other", 3.0)],
)
def test_a_runs_definition_is_its_specs_canonical_json_with_its_call(
    request_fields: str | None, queue: str, timeout: float | None
) -> None:
    from kernel.records import dumps, loads
    from kernel.spec.durations import canonical_json
    from kernel.spec.task_runs import run_definition, task_job

    spec, template = task_job("rt.plain", '{"max_attempts":3,"queue":"celery"}')
    args = canonical_json([1, 'é"', {"a": []}], "args")
    kwargs = canonical_json({"z": 1, "b": None}, "kwargs")
    text = "".join(run_definition(template, "rt.plain", args, kwargs, request_fields, queue,
                                  "at-least-once", timeout))  # fmt: skip
    payload = {"args": loads(args), "kwargs": loads(kwargs), "task": "rt.plain"}
    if request_fields is not None:
        payload["request"] = loads(request_fields)
    expected = {**spec, "payload": payload, "queue": queue, "delivery": "at-least-once",
                "timeout": timeout}  # fmt: skip
    assert text == dumps(expected)


def test_an_unkeyed_runs_trigger_key_leads_with_its_time() -> None:
    # Both unique indexes an enqueue writes lead with the trigger key: random keys put each
    # row on a random leaf page, a full-page image in the WAL for each page first touched
    # after a checkpoint (bench/README.md, session 22 enqueue: 86 a batch of 500 on 50k rows);
    # keys that lead with the time append to the same few pages.
    from kernel.spec.task_runs import trigger_key_of

    keys = [trigger_key_of(None, None) for _ in range(50)]
    assert all(key.startswith("enqueue:") and len(key) == 40 for key in keys)
    assert [key[:20] for key in keys] == sorted(key[:20] for key in keys)
    assert len(set(keys)) == 50
