"""A routed call (``kernel_route_tasks``) refuses the ``apply_async`` options the kernel
cannot honour, naming them, before anything is written (issue 38 item 7, issue 40):
stock Celery honours a ``link`` or a chain's rest, and a routed call that dropped them
left the caller waiting on a step that never ran: those are kernel links now, made
occurrences by the settle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, chain, chord, group
from celery.result import GroupResult
from celery.utils import uuid
from pydantic import BaseModel

from celery_app import install
from kernel import InvalidArgument, Kernel


@pytest.fixture
def routed_app(tmp_path: Path) -> Any:
    url = f"sqlite:///{tmp_path}/kernel.db"
    Kernel.open(url, migrate_schema=True).close()
    app = Celery("routedopts", broker="memory://", set_as_current=False)
    app.conf.update(kernel_database_url=url, kernel_route_tasks=["routedopts.routed"])
    install(app)

    @app.task(name="routedopts.routed", shared=False)
    def routed(label: str) -> str:
        return label

    @app.task(name="routedopts.other", shared=False)
    def other(value: str) -> str:
        return value

    app.routed, app.other, app.url = routed, other, url
    return app


def _occurrences(app: Any) -> list[Any]:
    kernel = Kernel.open(app.url)
    try:
        return list(kernel.list_occurrences())
    finally:
        kernel.close()


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda app: group(app.routed.s("a"), app.other.s("b")).apply_async(), "group[1]"),
        (
            lambda app: chord([chord([app.routed.s("b")], group(app.routed.s(), app.routed.s()))])(
                app.routed.s()
            ),
            "chord header[0].body",
        ),
        (
            lambda app: chord([app.routed.s("a")])(app.other.s().set(expires=5)),
            "chord.body.options.expires",
        ),
        (
            lambda app: app.routed.apply_async(("a",), link=app.other.s().set(expires=5)),
            "link[0].options.expires",
        ),
        (lambda app: app.routed.apply_async(("a",), serializer="pickle"), "serializer"),
        (lambda app: app.routed.apply_async(("a",), headers={"retries": 9}), "headers.retries"),
        (
            lambda app: app.routed.apply_async(("a",), headers={"kernel_run": 0}),
            "headers.kernel_run",
        ),
        (lambda app: app.routed.apply_async(("a",), expiration=5), "expiration"),
    ],
    ids=[
        "mixed-group",
        "chord-member-chord-with-group-body",
        "chord-body-expires",
        "link-expires",
        "pickle",
        "celery-header",
        "kernel-header",
        "expiration",
    ],
)
def test_an_option_the_kernel_cannot_honour_is_refused_naming_it(
    routed_app: Any, call: Any, named: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        call(routed_app)
    assert named in refused.value.field.split(", ")
    assert "kernel_route_tasks" in str(refused.value)
    assert _occurrences(routed_app) == []


def test_honoured_and_publishing_options_are_accepted(routed_app: Any) -> None:
    routed_app.routed.delay("plain")
    routed_app.routed.apply_async(("later",), countdown=5, priority=3, reply_to="r", retry=True)
    routed_app.routed.apply_async(("json",), serializer="json")
    assert len(_occurrences(routed_app)) == 3


def test_a_routed_call_answers_celerys_async_result_under_the_task_id(routed_app: Any) -> None:
    """The caller gets Celery's own AsyncResult with the id Celery would have given
    (``task_id``, else a fresh uuid); that id is the occurrence's key, so the same
    ``task_id`` twice is one occurrence, and ``send_task`` of a routed name goes through
    the kernel as well (issue 40)."""
    from celery.result import AsyncResult

    given = routed_app.routed.apply_async(("a",), task_id="order-7")
    again = routed_app.routed.apply_async(("a",), task_id="order-7")
    fresh = routed_app.routed.delay("b")
    sent = routed_app.send_task("routedopts.routed", ("c",))
    for answered in (given, again, fresh, sent):
        assert isinstance(answered, AsyncResult) and answered.backend is routed_app.backend
    assert given.id == again.id == "order-7"
    assert len({fresh.id, sent.id, "order-7"}) == 3
    keys = sorted(o.trigger_key for o in _occurrences(routed_app))
    assert keys == sorted(f"key:{i}" for i in ("order-7", fresh.id, sent.id))


def _settle(app: Any, occurrence_id: int, result: Any = None, failed: bool = False) -> None:
    kernel = Kernel.open(app.url)
    try:
        claim = kernel.claim(occurrence_id, owner="w", lease=30)
        assert claim is not None
        if failed:
            kernel.fail(occurrence_id, owner="w", fence=claim.fence, code="E", message="m",
                        retryable=False)  # fmt: skip
        else:
            kernel.succeed(occurrence_id, owner="w", fence=claim.fence, result=result)
    finally:
        kernel.close()


def _by_key(app: Any, key: str) -> Any:
    [occ] = [o for o in _occurrences(app) if o.trigger_key == f"key:{key}"]
    return occ


def test_a_chain_s_steps_are_made_by_each_settle_with_the_previous_result(
    routed_app: Any,
) -> None:
    app = routed_app
    answer = chain(app.routed.s("a"), app.other.s(), app.other.si("last")).apply_async()
    [first] = _occurrences(app)
    assert first.payload["task"] == "routedopts.routed"
    _settle(app, first.id, "A")
    [second] = [o for o in _occurrences(app) if o.id != first.id]
    assert {**second.payload, "request": None} == {
        "task": "routedopts.other", "args": ["A"], "kwargs": {}, "request": None,
    }  # fmt: skip
    _settle(app, second.id, "B")
    # The chain's AsyncResult is its last step's: the kernel's key for that step.
    last = _by_key(app, answer.id)
    assert last.payload["args"] == ["last"]  # immutable
    assert len(_occurrences(app)) == 3


def test_link_and_link_error_become_the_run_s_callback_and_errback(routed_app: Any) -> None:
    app = routed_app
    ok = app.other.s("x").set(task_id="cb-1")
    err = app.other.s().set(task_id="eb-1")
    made = app.routed.apply_async(("a",), task_id="run-1", link=ok, link_error=err)
    _settle(app, _by_key(app, made.id).id, "done")
    assert _by_key(app, "cb-1").payload["args"] == ["done", "x"]
    assert [o for o in _occurrences(app) if o.trigger_key == "key:eb-1"] == []
    failing = app.routed.apply_async(
        ("b",), task_id="run-2", link_error=err.clone().set(task_id="eb-2")
    )
    _settle(app, _by_key(app, failing.id).id, failed=True)
    assert _by_key(app, "eb-2").payload["args"] == ["run-2"]  # errback(task_id), as a task


def test_countdown_eta_and_expires_of_a_routed_call_are_the_occurrences_times(
    routed_app: Any,
) -> None:
    """As Celery reads them: ``countdown``/``eta`` the time it may start, ``expires``
    seconds after the call or an instant (ISO text too) its start deadline."""
    at = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
    before = datetime.now(UTC)
    routed_app.routed.apply_async(("countdown",), countdown=90, expires=120)
    routed_app.routed.apply_async(("eta",), eta=at, expires=at + timedelta(minutes=5))
    routed_app.routed.apply_async(("iso",), eta=at.isoformat(), expires=at.isoformat())
    routed_app.routed.apply_async(("none",))
    after = datetime.now(UTC)
    got = {o.payload["args"][0]: o for o in _occurrences(routed_app)}
    countdown = got["countdown"]
    assert before + timedelta(seconds=90) <= countdown.available_at <= after + timedelta(seconds=90)
    assert countdown.expires_at is not None
    assert before + timedelta(seconds=120) <= countdown.expires_at <= after + timedelta(seconds=120)
    assert (got["eta"].available_at, got["eta"].expires_at) == (at, at + timedelta(minutes=5))
    assert (got["iso"].available_at, got["iso"].expires_at) == (at, at)
    assert got["none"].expires_at is None


def test_a_tasks_own_expires_applies_to_a_routed_call(routed_app: Any) -> None:
    routed_app.routed.expires = 60
    try:
        before = datetime.now(UTC)
        routed_app.routed.delay("own")
        [occ] = _occurrences(routed_app)
        assert occ.expires_at is not None and occ.expires_at >= before + timedelta(seconds=60)
    finally:
        routed_app.routed.expires = None


def test_a_calls_time_limits_and_priority_are_its_runs_own(routed_app: Any) -> None:
    """Honoured, not refused (issue 38 item 7): the soft limit (else the hard one) is the
    run's timeout, which its hint's Celery time limits enforce; the job is unchanged."""
    routed_app.routed.apply_async(("soft",), soft_time_limit=4, time_limit=9)
    routed_app.routed.apply_async(("hard",), time_limit=7, priority=200)
    routed_app.routed.apply_async(("plain",))
    runs = {o.payload["args"][0]: o for o in _occurrences(routed_app)}
    assert {label: o.definition["timeout"] for label, o in runs.items()} == {
        "soft": 4,
        "hard": 7,
        "plain": None,
    }
    kernel = Kernel.open(routed_app.url)
    try:
        hints = {h.occurrence_id: h for h in kernel.dispatch_batch(limit=9, rehint_after=0)}
    finally:
        kernel.close()
    assert hints[runs["hard"].id].priority == 200 and hints[runs["plain"].id].priority == 0
    assert hints[runs["soft"].id].timeout == 4


def test_a_routed_group_and_chord_are_made_in_one_enqueue_under_their_task_ids(
    routed_app: Any,
) -> None:
    def keys() -> list[str]:
        return [o.trigger_key for o in sorted(_occurrences(routed_app), key=lambda o: o.id)]

    made = group(routed_app.routed.s(label) for label in "abc").apply_async()
    assert keys() == [f"key:{r.id}" for r in made.results]
    body = chord([routed_app.routed.s("x"), routed_app.routed.s("y")])(routed_app.other.s())
    # The body's result, its parent the header's: the body waits for its members.
    assert keys()[3:] == [f"key:{r.id}" for r in body.parent.results]
    assert f"key:{body.id}" not in keys()


def test_wrong_arguments_are_refused_as_celery_refuses_them(routed_app: Any) -> None:
    # Celery checks a typed task's arguments against its signature before publishing
    # (Celery's t/integration test_wrong_arguments); a routed call wrote the occurrence
    # and the run failed later instead.

    @routed_app.task(name="routedopts.untyped", shared=False, typing=False)
    def untyped(label: str) -> str:
        return label

    routed_app.conf.kernel_route_tasks = ["routedopts.*"]  # read at the first call
    with pytest.raises(TypeError):
        routed_app.routed.delay()
    with pytest.raises(TypeError):
        routed_app.routed.apply_async(("a",), {"wrong": 1})
    assert _occurrences(routed_app) == []
    untyped.delay()  # typing=False: not checked at the call, as in Celery
    assert len(_occurrences(routed_app)) == 1


class Pair(BaseModel):
    x: int
    y: int


def test_a_pydantic_tasks_model_arguments_are_dumped_as_celery_dumps_them(
    routed_app: Any,
) -> None:
    # Celery's apply_async dumps the models a pydantic=True task rebuilds (Celery's
    # t/integration test_pydantic_model_arguments); a routed call refused them as not JSON.
    @routed_app.task(name="routedopts.pair", shared=False, pydantic=True)
    def pair(data: Pair) -> int:
        return data.x + data.y

    routed_app.conf.kernel_route_tasks = ["routedopts.*"]  # read at the first call
    pair.delay(Pair(x=1, y=2))
    pair.apply_async(kwargs={"data": Pair(x=3, y=4)})
    payloads = sorted((o.payload["args"], o.payload["kwargs"]) for o in _occurrences(routed_app))
    assert payloads == [([], {"data": {"x": 3, "y": 4}}), ([{"x": 1, "y": 2}], {})]


def test_a_soft_limit_past_the_hard_one_is_refused_as_celery_refuses_it(routed_app: Any) -> None:
    # Celery's apply_async raises ValueError for such a task before publishing (Celery's
    # t/integration test_soft_time_limit_exceeding_time_limit); a routed call enqueued it.
    @routed_app.task(name="routedopts.limits", shared=False, time_limit=5, soft_time_limit=10)
    def limits() -> None:
        return None

    routed_app.conf.kernel_route_tasks = ["routedopts.*"]  # read at the first call
    with pytest.raises(ValueError, match="soft_time_limit must be less than or equal"):
        limits.delay()
    assert _occurrences(routed_app) == []


def test_a_routed_call_subscribes_to_its_result_as_celerys_publish_does(
    tmp_path: Path, redis_url: str
) -> None:
    # Celery's send_task asks the result backend to follow the new task id (Redis:
    # subscribes to its result channel) so the answer is not missed (Celery's
    # t/integration test_asyncresult_get_cancels_subscription); a routed call did not.
    import redis

    url = f"sqlite:///{tmp_path}/kernel.db"
    Kernel.open(url, migrate_schema=True).close()
    app = Celery("routedsub", broker="memory://", backend=redis_url, set_as_current=False)
    app.conf.update(kernel_database_url=url, kernel_route_tasks=["routedsub.*"])
    install(app)

    @app.task(name="routedsub.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="routedsub.quiet", shared=False, ignore_result=True)
    def quiet() -> None:
        return None

    client = redis.Redis.from_url(redis_url)
    try:
        result = add.delay(1, 2)
        quiet_result = quiet.delay()
        channels = set(client.pubsub_channels())
        assert f"celery-task-meta-{result.id}".encode() in channels
        assert f"celery-task-meta-{quiet_result.id}".encode() not in channels
        # Celery's send_task says which results are ignored on the AsyncResult.
        assert (result.ignored, quiet_result.ignored) == (False, True)
    finally:
        client.close()
        app.backend.result_consumer.cancel_for(result.id)


def test_a_chain_step_s_own_countdown_and_eta_hold_it_back_once_made(routed_app: Any) -> None:
    """A step's ``countdown`` counts from the settle that makes it (Celery sends the next
    step then); its ``eta`` is its instant, a datetime or ISO text as Celery takes it."""
    app = routed_app
    at = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
    chain(app.routed.s("a"), app.other.s().set(countdown=60, task_id="later")).apply_async()
    chain(app.routed.s("b"), app.other.s(), app.other.s().set(eta=at, task_id="at")).apply_async()
    iso = app.other.s().set(eta=at.isoformat(), task_id="iso-cb")
    app.routed.apply_async(("c",), task_id="iso", link=iso)
    first, second = (
        next(o for o in _occurrences(app) if o.payload["args"] == [label]) for label in "ab"
    )
    before = datetime.now(UTC)
    _settle(app, first.id, "A")
    after = datetime.now(UTC)
    later = _by_key(app, "later")
    assert before + timedelta(seconds=60) <= later.available_at <= after + timedelta(seconds=60)
    _settle(app, second.id, "B")
    _settle(app, next(o for o in _occurrences(app) if o.payload["args"] == ["B"]).id, "C")
    assert _by_key(app, "at").available_at == at
    _settle(app, _by_key(app, "iso").id, "D")
    assert _by_key(app, "iso-cb").available_at == at


def test_map_starmap_and_chunks_of_a_routed_task_go_through_the_kernel(routed_app: Any) -> None:
    """Celery runs ``task.map``/``task.starmap`` as one builtin call (``celery.map``,
    ``celery.starmap``) looping over the task's body, and ``task.chunks`` as a group of
    ``celery.starmap`` calls: over a routed task each is an occurrence of that builtin,
    made under the task id Celery answers, whose body is the builtin's own loop."""
    app = routed_app
    mapped = app.routed.map(["a", "b"]).delay()
    starred = app.routed.starmap([("c",), ("d",)]).apply_async(task_id="star-1")
    assert starred.id == "star-1"
    chunked = app.routed.chunks([(str(i),) for i in range(5)], 2).apply_async()
    assert isinstance(chunked, GroupResult) and len(chunked.results) == 3
    occurrences = {o.trigger_key.removeprefix("key:"): o for o in _occurrences(app)}
    assert set(occurrences) == {mapped.id, "star-1", *(r.id for r in chunked.results)}
    for task_id, builtin, expected in [
        (mapped.id, "celery.map", ["a", "b"]),
        ("star-1", "celery.starmap", ["c", "d"]),
        (chunked.results[2].id, "celery.starmap", ["4"]),
    ]:
        payload = occurrences[task_id].payload
        assert payload["task"] == builtin
        assert payload["kwargs"]["task"]["task"] == "routedopts.routed"
        # What the kernel worker's task adapter calls: the builtin's body.
        assert app.tasks[builtin].run(*payload["args"], **payload["kwargs"]) == expected


def test_a_chord_as_a_chain_s_step_is_made_by_the_settle_before_it(routed_app: Any) -> None:
    """``chain(a, chord([b, b.si(z)], c), d)``: a's settle makes the chord's members under
    Celery's task ids (a's result first unless immutable); the last member's settle makes
    the body with their results in group order; d follows the body. The chain answers
    d's AsyncResult, a chain ending in the chord the body's."""
    app = routed_app
    app.conf.result_backend = "cache+memory://"  # Celery's chain checks chords are allowed
    header = [app.other.s(), app.other.si("z")]
    answer = chain(app.routed.s("a"), chord(header, app.other.s()), app.other.s()).apply_async()
    [first] = _occurrences(app)
    _settle(app, first.id, "A")
    members = sorted((o for o in _occurrences(app) if o.id != first.id), key=lambda o: o.id)
    assert [m.payload["args"] for m in members] == [["A"], ["z"]]
    for member, result in zip(members, ("x", "y"), strict=True):
        _settle(app, member.id, result)
    [body] = [o for o in _occurrences(app) if o.id not in {first.id, *(m.id for m in members)}]
    assert body.payload["args"] == [["x", "y"]]
    _settle(app, body.id, "xy")
    assert _by_key(app, answer.id).payload["args"] == ["xy"]
    ending = chain(app.routed.s("b"), chord([app.other.s()], app.other.s())).apply_async()
    [start] = [o for o in _occurrences(app) if o.payload["args"] == ["b"]]
    _settle(app, start.id, "B")
    [member] = [o for o in _occurrences(app) if o.payload["args"] == ["B"]]
    _settle(app, member.id, "m")
    assert _by_key(app, ending.id).payload["args"] == [["m"]]


def test_a_chain_starting_with_a_routed_chord_follows_its_body(routed_app: Any) -> None:
    """``chain(chord([a], b), c)``: Celery hands the chain's rest to the chord, whose body
    carries it: c is made by the body's settle."""
    app = routed_app
    app.conf.result_backend = "cache+memory://"  # Celery's chain checks chords are allowed
    answer = chain(chord([app.routed.s("a")], app.other.s()), app.other.s()).apply_async()
    [member] = _occurrences(app)
    _settle(app, member.id, "A")
    [body] = [o for o in _occurrences(app) if o.id != member.id]
    assert body.payload["args"] == [["A"]]
    _settle(app, body.id, "B")
    assert _by_key(app, answer.id).payload["args"] == ["B"]


# What a routed run's body sees in ``self.request`` of what its call gave (issue 40):
# compared with the request stock Celery's worker builds from the message the same call
# publishes (read back from the in-memory broker and made Celery's own Request).


def _seeing(app: Any, name: str, **task_options: Any) -> Any:
    @app.task(name=name, bind=True, shared=False, **task_options)
    def seen(self: Any, label: str) -> str:
        app.seen.append(self.request)
        return label

    app.seen = []
    return seen


@pytest.fixture
def stock_app() -> Any:
    app = Celery("stockopts", broker="memory://", set_as_current=False)
    # The in-memory broker is the process's: a queue of this test's own.
    app.conf.update(result_backend="cache+memory://", task_default_queue=uuid())
    yield app
    app.close()


def _stock_request(app: Any, call: Any) -> Any:
    """The ``self.request`` stock Celery's worker gives the body of ``call()``'s message."""
    from celery.app.task import Context
    from celery.worker.request import Request

    result = call()
    with app.connection_for_read() as conn:
        message = conn.SimpleQueue(app.conf.task_default_queue, no_ack=True).get(timeout=5)
    request = Request(message, app=app, task=app.tasks[message.headers["task"]])
    context = Context(request.request_dict, args=request.args, kwargs=request.kwargs,
                      called_directly=False)  # fmt: skip
    return result, context, message


def _routed_request(app: Any, call: Any) -> Any:
    """The ``self.request`` a kernel worker gives the body of the run ``call()`` made."""
    from unit.adapter_support import make_context

    from adapters.task import TaskAdapter
    from celery_app.task_call import call_task

    result = call()
    occurrence = _by_key(app, result.id)
    adapter = TaskAdapter(app)
    adapter.call = call_task
    ctx = make_context("task", occurrence.payload)  # the payload as a job's snapshot holds it
    ctx.occurrence = occurrence  # its run id: the key, the caller's task id
    adapter.execute(ctx)
    return result, app.seen.pop(), occurrence


def _request_fields(task: Any, request: Any) -> dict[str, Any]:
    from celery.app.task import get_actual_ignore_result

    return {
        "headers": request.headers,
        "tenant": getattr(request, "tenant", None),
        "app_id": (request.properties or {}).get("app_id"),
        "time_limit": request.time_limit,
        "soft_time_limit": request.soft_time_limit,
        "ignore_result": get_actual_ignore_result(task, request),
        "stamped_headers": request.stamped_headers,
        "stamps": request.stamps,
    }


class _Monitoring:
    """A stamping visitor, as Celery's t/integration test_revoked_by_headers_* stamp."""

    def __new__(cls) -> Any:
        from celery.canvas import StampingVisitor

        class Visitor(StampingVisitor):
            def on_signature(self, sig: Any, **headers: Any) -> dict[str, Any]:
                return {"monitoring_id": "m-1"}

        return Visitor()


def _stamped(task: Any) -> Any:
    sig = task.si("a")
    sig.stamp(visitor=_Monitoring())
    return sig.apply_async()


_CALLS = {
    "plain": lambda t: t.delay("a"),
    "headers": lambda t: t.apply_async(("a",), headers={"x-test-header": "v", "tenant": "t"}),
    "app_id": lambda t: t.apply_async(("a",), app_id="1234"),
    "time-limits": lambda t: t.apply_async(("a",), time_limit=30, soft_time_limit=20),
    "ignore_result": lambda t: t.apply_async(("a",), ignore_result=True),
    "keep-result": lambda t: t.apply_async(("a",), ignore_result=False),
    "stamped": _stamped,
}


@pytest.mark.parametrize("call", list(_CALLS), ids=list(_CALLS))
@pytest.mark.parametrize("own", [{}, {"time_limit": 60, "soft_time_limit": 45,
                                      "ignore_result": True}], ids=["bare", "own"])  # fmt: skip
def test_a_routed_run_s_request_holds_what_its_call_gave_as_celery_s_does(
    routed_app: Any, stock_app: Any, call: str, own: dict[str, Any]
) -> None:
    """Custom ``headers`` (``self.request.headers`` and each as ``self.request.<name>``),
    message properties (``app_id``), ``time_limit``/``soft_time_limit`` (the call's, else
    the task's own), ``ignore_result`` and stamps reach the body as stock Celery's worker
    gives them; they were refused, or the request had None."""
    routed_app.conf.kernel_route_tasks = ["routedopts.*"]  # read at the first call
    stock_task = _seeing(stock_app, "stockopts.seen", **own)
    routed_task = _seeing(routed_app, "routedopts.seen", **own)
    stock_result, stock, _ = _stock_request(stock_app, lambda: _CALLS[call](stock_task))
    routed_result, routed, _ = _routed_request(routed_app, lambda: _CALLS[call](routed_task))
    assert _request_fields(routed_task, routed) == _request_fields(stock_task, stock)
    assert bool(routed_result.ignored) == bool(stock_result.ignored)


def test_an_ignored_result_is_not_written_by_the_run(routed_app: Any) -> None:
    """``ignore_result=True`` per call: the run writes no result (Celery's test_ignore_result,
    test_retry_preserves_ignore_result_true), and ``False`` keeps an ignoring task's."""
    from celery import states

    routed_app.conf.result_backend = "cache+memory://"
    routed_app.conf.kernel_route_tasks = ["routedopts.*"]  # read at the first call
    keeping = _seeing(routed_app, "routedopts.seen")
    ignoring = _seeing(routed_app, "routedopts.quiet", ignore_result=True)
    ignored, _, _ = _routed_request(
        routed_app, lambda: keeping.apply_async(("a",), ignore_result=True)
    )
    kept, _, _ = _routed_request(
        routed_app, lambda: ignoring.apply_async(("b",), ignore_result=False)
    )
    assert ignored.ignored is True and ignored.get(timeout=1) is None
    assert routed_app.backend.get_state(ignored.id) == states.PENDING
    assert routed_app.backend.get_state(kept.id) == states.SUCCESS


def test_argsrepr_and_kwargsrepr_are_what_monitors_see_of_a_routed_run(
    routed_app: Any, stock_app: Any
) -> None:
    """Celery shows ``argsrepr``/``kwargsrepr`` in its logs and events instead of the
    arguments (to keep secrets out of them); the kernel's hint and run events do too."""
    from celery_app.hints import call_reprs

    routed_app.conf.kernel_route_tasks = ["routedopts.*"]  # read at the first call
    stock_task = _seeing(stock_app, "stockopts.seen")
    routed_task = _seeing(routed_app, "routedopts.seen")
    given = {"argsrepr": "(hidden,)", "kwargsrepr": "{}"}
    _, _, message = _stock_request(stock_app, lambda: stock_task.apply_async(("pw",), **given))
    result = routed_task.apply_async(("pw",), **given)
    shown = call_reprs(_by_key(routed_app, result.id).payload)
    stock = (message.headers["argsrepr"], message.headers["kwargsrepr"])
    assert shown == stock == ("(hidden,)", "{}")
    plain = routed_task.delay("open")
    assert call_reprs(_by_key(routed_app, plain.id).payload) == ("['open']", "{}")


def test_a_secret_looking_header_is_masked_where_the_run_is_shown(routed_app: Any) -> None:
    from kernel import redacted_spec

    made = routed_app.routed.apply_async(("a",), headers={"Authorization": "Bearer x", "t": 1})
    shown = redacted_spec(_by_key(routed_app, made.id).definition)
    assert shown["payload"]["request"]["headers"] == {"Authorization": "***", "t": 1}


def test_the_end_the_kernel_made_of_a_run_whose_call_ignored_results_is_not_written(
    routed_app: Any,
) -> None:
    """A run the kernel ended without its body (cancelled, lease lost for good) owes its
    end to the backend: not when its call said ``ignore_result=True``, as Celery's worker
    writes no REVOKED for such a call."""
    from celery import states

    from celery_app.task_results import store_end

    routed_app.conf.result_backend = "cache+memory://"
    ended = {}
    for label, ignore in (("quiet", True), ("heard", None)):
        made = routed_app.routed.apply_async((label,), ignore_result=ignore)
        occurrence = _by_key(routed_app, made.id)
        body = {"trigger_key": occurrence.trigger_key, "status": "cancelled", "error": None,
                "occurrence_id": occurrence.id}  # fmt: skip
        ended[label] = (store_end(routed_app, occurrence.payload, body), made.state)
    assert ended == {"quiet": (False, states.PENDING), "heard": (True, states.REVOKED)}
