"""A run's queue is the one stock Celery's router picks (issue 38: routing kept).

The same app configuration is made twice: stock Celery, whose published message's routing
key is read from ``before_task_publish`` (for ``apply_async`` and for stock Beat's
``Scheduler.apply_async`` of an entry), and on the kernel, whose occurrence (routed call,
``enqueue``, a link) or Beat job spec holds the queue. They must name the same queue: the
call's ``queue``, then the task's own ``queue`` (Celery merges it into the call's options),
then ``task_routes`` (map, glob, regex, router function), then ``task_default_queue``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.beat import ScheduleEntry, Scheduler
from celery.signals import before_task_publish

from beat_schedule.sync import read_beat_schedule
from celery_app import enqueue, install
from kernel import InvalidArgument, Kernel

# A task's own ``queue`` is deprecated by Celery, yet moved apps have it and Celery honours it.
pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")


def _by_args(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> Any:
    """A router function: the queue depends on the call's first argument."""
    if name == "rt.plain" and args and args[0] == "vip":
        return {"queue": "fn-vip"}
    return None


ROUTES: dict[str, Any] = {
    "none": None,
    "map": {"rt.plain": {"queue": "mapped"}},
    "glob": {"rt.*": "globbed"},
    "regex": [{re.compile(r"rt\.p.*"): {"queue": "rx"}}],
    "function": [_by_args, {"rt.*": {"queue": "after-fn"}}],
}

#: (task, args, apply_async options): each asked of every route setting.
CALLS = [
    ("rt.plain", ["a"], {}),
    ("rt.plain", ["vip"], {}),
    ("rt.plain", ["a"], {"queue": "explicit"}),
    ("rt.own", ["a"], {}),
]


def _app(routes: Any, kernel_url: str | None) -> Any:
    app = Celery("rt", broker="memory://", set_as_current=False)
    app.conf.update(task_default_queue="dflt", task_routes=routes)
    if kernel_url is not None:
        app.conf.update(kernel_database_url=kernel_url, kernel_route_tasks=["rt.*"])
        install(app)
    app.task(name="rt.plain", shared=False)(_body)
    app.task(name="rt.own", shared=False, queue="own")(_body)
    return app


def _body(label: str) -> str:
    return label


@pytest.fixture
def published() -> Iterator[list[str]]:
    """The routing key of each message stock Celery publishes in this process."""
    keys: list[str] = []

    def seen(sender: Any = None, routing_key: str = "", **kw: Any) -> None:
        keys.append(routing_key)

    before_task_publish.connect(seen, weak=False)
    yield keys
    before_task_publish.disconnect(seen)


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/kernel.db"
    Kernel.open(url, migrate_schema=True).close()
    return url


def _stock_queue(routes: Any, published: list[str], task: str, args: Any, options: Any) -> str:
    published.clear()
    _app(routes, None).tasks[task].apply_async(args, **options)
    [key] = published
    return key


def _kernel_queues(url: str) -> list[str]:
    kernel = Kernel.open(url)
    try:
        return [o.queue for o in sorted(kernel.list_occurrences(), key=lambda o: o.id)]
    finally:
        kernel.close()


@pytest.mark.parametrize("routes", ROUTES, ids=list(ROUTES))
def test_a_routed_call_and_an_enqueue_take_the_queue_celerys_router_picks(
    routes: str, published: list[str], url: str
) -> None:
    stock = [_stock_queue(ROUTES[routes], published, t, a, o) for t, a, o in CALLS]
    app = _app(ROUTES[routes], url)
    for task, args, options in CALLS:
        app.tasks[task].apply_async(args, **options)  # routed (kernel_route_tasks)
    for task, args, options in CALLS:
        enqueue(app, task, args, queue=options.get("queue"))
    assert _kernel_queues(url) == stock + stock


@pytest.mark.parametrize("routes", ROUTES, ids=list(ROUTES))
def test_a_beat_entry_takes_the_queue_celerys_beat_sends_it_to(
    routes: str, published: list[str], url: str
) -> None:
    entries = {
        f"e{i}": {"task": task, "schedule": 60.0, "args": args, "options": options}
        for i, (task, args, options) in enumerate(CALLS)
    }
    stock_app = _app(ROUTES[routes], None)
    scheduler = Scheduler(stock_app, lazy=True)
    stock = []
    for name, raw in entries.items():
        published.clear()
        entry = ScheduleEntry(name=name, app=stock_app, **raw)
        scheduler.apply_async(entry, advance=False)
        stock.append(published[0])
    app = _app(ROUTES[routes], url)
    app.conf.beat_schedule = entries
    read = read_beat_schedule(app.conf, app.tasks, app=app)
    assert [e.spec["queue"] if e.spec else e.refused for e in read.entries] == stock


def test_a_link_takes_the_queue_celerys_router_picks_for_it(url: str) -> None:
    app = _app(ROUTES["map"], url)
    app.tasks["rt.own"].apply_async(("a",), link=app.tasks["rt.plain"].si("b"))
    kernel = Kernel.open(url)
    try:
        [first] = kernel.list_occurrences()
        claim = kernel.claim(first.id, owner="w", lease=30)
        assert claim is not None
        kernel.succeed(first.id, owner="w", fence=claim.fence, result="a")
    finally:
        kernel.close()
    assert _kernel_queues(url) == ["own", "mapped"]


def test_a_route_to_an_exchange_without_a_queue_is_refused_naming_it(
    url: str, published: list[str]
) -> None:
    routes = {"rt.plain": {"exchange": "fanout-x", "routing_key": "k"}}
    app = _app(routes, url)
    with pytest.raises(InvalidArgument) as refused:
        app.tasks["rt.plain"].delay("a")
    assert refused.value.field == "queue"
    assert "exchange 'fanout-x'" in str(refused.value) and "task_routes" in str(refused.value)
    assert _kernel_queues(url) == []
    app.conf.beat_schedule = {"e": {"task": "rt.plain", "schedule": 60.0}}
    [entry] = read_beat_schedule(app.conf, app.tasks, app=app).entries
    assert entry.refused is not None and "beat_schedule['e'].options.queue" in entry.refused
