"""Stamps and the options Celery puts on a canvas's links and steps (issue 40): a stamped
step's, link's or errback's stamps become its kernel link's request fields (its run's
``self.request.stamps``), a run's stamps go on its hint's headers as on its stock message,
and an errback Celery clones immutable takes no argument."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import celery
import pytest
from celery import chain, chord
from celery.canvas import StampingVisitor
from celery.signals import before_task_publish

from celery_app.canvas_links import link_signature, links
from celery_app.hints import publish_hints, resend_run_hints
from kernel import DispatchHint


@pytest.fixture
def app() -> Iterator[celery.Celery]:
    app = celery.Celery("t", set_as_current=False, broker="memory://", backend="cache+memory://")
    yield app
    app.close()


class Stamp(StampingVisitor):  # type: ignore[misc]
    def __init__(self, **stamps: Any) -> None:
        self.stamps = stamps

    def on_signature(self, sig: Any, **headers: Any) -> dict[str, Any]:
        return dict(self.stamps)


def _stamped(link: dict[str, Any]) -> Any:
    return link.get("request")


def test_a_stamped_chains_steps_carry_their_stamps(app: celery.Celery) -> None:
    """``chain(a, b, c).stamp(...)``: Celery's chain gives the first step the others as
    its ``chain`` option, each stamped; each step's link carries them for its run."""
    a = app.signature("t.a")
    canvas = chain(a.clone((1, 1)), a.clone((2,)), a.clone((3,)))
    canvas.stamp(visitor=Stamp(stamp=42))
    steps = canvas.freeze() and canvas.tasks
    callbacks, _ = links({"chain": [dict(s) for s in reversed(steps[1:])]})
    [second] = callbacks
    [third] = second["rest"]  # a chain's later steps, flat
    for step in (second, third):
        assert _stamped(step) == {"stamped_headers": ["stamp"], "stamps": {"stamp": 42}}


def test_links_stamped_after_linking_carry_the_last_stamps(app: celery.Celery) -> None:
    """Celery's test_linking_stamped_sig and test_err_linking_stamped_sig: a signature
    stamped, linked, stamped again; its link and errback carry the stamp (``mtask_id``)."""
    sig = app.signature("t.a", immutable=True)
    sig.stamp(visitor=Stamp(mtask_id="first"))
    sig.link(app.signature("t.link", immutable=True))
    sig.link_error(app.signature("t.error", immutable=True))
    sig.stamp(visitor=Stamp(mtask_id="1234"))
    callbacks, errbacks = links(sig.options)
    for made in (*callbacks, *errbacks):
        assert _stamped(made) == {"stamped_headers": ["mtask_id"], "stamps": {"mtask_id": "1234"}}


def test_a_dictionary_link_error_stamped_is_honoured(app: celery.Celery) -> None:
    """Celery's test_stamp_canvas_with_dictionary_link_error: an errback given as a plain
    dict, stamped ``on_signature`` (a stamp named like the visitor's method)."""
    sig = app.signature("t.fail", immutable=True)
    sig.options["link_error"] = dict(app.signature("t.fail", immutable=True))
    sig.stamp(visitor=Stamp(on_signature=42))
    _, [errback] = links(sig.options)
    assert _stamped(errback) == {
        "stamped_headers": ["on_signature"],
        "stamps": {"on_signature": 42},
    }


def test_a_stamped_chord_step_carries_stamps_on_members_and_body(app: celery.Celery) -> None:
    a = app.signature("t.a")
    step = chord([a.clone((1, 1)), a.clone((2, 2))], app.signature("t.sum"))
    step.stamp(visitor=Stamp(stamp=[4, 2]))
    step.freeze()
    made = link_signature(dict(step), "chain[0]")
    expected = {"stamped_headers": ["stamp"], "stamps": {"stamp": [4, 2]}}
    assert _stamped(made) == expected
    assert [_stamped(m) for m in made["chord"]["header"]] == [expected, expected]


def test_an_errback_celery_clones_immutable_takes_no_argument(app: celery.Celery) -> None:
    """A chord's errback on its header members (task_allow_error_cb_on_chord_header) is
    ``errback.clone(immutable=True)``: the flag among its options."""
    errback = app.signature("t.error", args=(1,)).clone(immutable=True)
    _, [made] = links({"link_error": [errback]})
    assert made["immutable"] is True and made["args"] == [1]


def test_a_stamped_runs_hint_carries_its_stamps_in_its_headers(app: celery.Celery) -> None:
    """Celery's test_stamp_value_type_defined_by_visitor and
    test_properties_not_affected_from_stamping, on the hint: its headers carry
    ``stamped_headers`` and ``stamps`` (a list stays a list), its properties neither."""
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def published(headers: Any = None, properties: Any = None, **_: Any) -> None:
        seen.append((dict(headers), dict(properties)))

    before_task_publish.connect(published, weak=False)
    try:
        request = {"stamped_headers": ["stamp", "queue"], "stamps": {"stamp": [4, 2], "queue": 1}}
        hints = [
            _hint(1, {"task": "t.a", "args": [], "kwargs": {}, "request": request}),
            _hint(2, {"task": "t.a", "args": [], "kwargs": {}}),
        ]
        with app.producer_or_acquire() as producer:
            publish_hints(app, producer, hints, batch_max=1, hint_options={})
    finally:
        before_task_publish.disconnect(published)
    [(stamped, properties), (plain, _)] = seen
    # ``queue`` is send_task's own option: the run's request keeps it, the hint cannot.
    assert (stamped["stamped_headers"], stamped["stamps"]) == (["stamp"], {"stamp": [4, 2]})
    assert "stamped_headers" not in properties and "stamp" not in properties
    assert not plain["stamped_headers"] and not plain["stamps"]


def test_a_stamped_runs_hint_sent_again_keeps_its_stamps(app: celery.Celery) -> None:
    """Celery's test_stamps_remain_on_task_retry: a run's hint sent again for when it is
    due (a retry's countdown the worker's clock had not reached) keeps the stamps its
    hint had, as Celery's retried message keeps its request's."""
    seen: list[dict[str, Any]] = []

    def published(headers: Any = None, **_: Any) -> None:
        seen.append(dict(headers))

    before_task_publish.connect(published, weak=False)
    try:
        given = {"stamped_headers": ["stamp"], "stamps": {"stamp": 42}}
        resend_run_hints(app, [1], queue="celery", shadow="t.a", per_message=1,
                         countdown=0.1, task_id="run-1", stamps=given)  # fmt: skip
    finally:
        before_task_publish.disconnect(published)
    [headers] = seen
    assert (headers["stamped_headers"], headers["stamps"]) == (["stamp"], {"stamp": 42})


def _hint(occurrence_id: int, payload: dict[str, Any]) -> DispatchHint:
    return DispatchHint(
        occurrence_id=occurrence_id, job_id="task:t.a", kind="task", queue="celery",
        priority=0, timeout=None, trigger_key=f"key:run-{occurrence_id}", payload=payload,
    )  # fmt: skip


def test_a_chord_steps_link_and_link_error_are_its_bodys(app: celery.Celery) -> None:
    """Celery's test_link_option_on_chain_ending_in_chord and
    test_link_error_option_runs_on_header_failure[chord]: a chord step's own ``link`` and
    ``link_error`` (a chain's ``link`` goes on its last step; a chord body's
    ``link_error``) are its body's, as Celery's chord moves them there."""
    a = app.signature("t.a")
    step = chord([a.clone((10,)), a.clone((20,))], app.signature("t.sum"))
    step.options["link"] = [app.signature("t.echo")]
    step.options["link_error"] = [app.signature("t.echo", ("failed",), immutable=True)]
    step.freeze()
    made = link_signature(dict(step), "chain[1]")
    [callback] = made["callbacks"]
    [errback] = made["errbacks"]
    assert (made["task"], callback["task"]) == ("t.sum", "t.echo")
    assert (errback["args"], errback["immutable"]) == (["failed"], True)
    assert all(m["callbacks"] == m["errbacks"] == [] for m in made["chord"]["header"])
