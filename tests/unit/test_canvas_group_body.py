"""A chord's group body as the kernel's chord makes it (celery_app.canvas_links.group_body):
the group's own ``link_error`` replaces its tasks' as Celery's group gives it to each
one's ``apply_async``; a chord among its tasks may have a group body of its own."""

from __future__ import annotations

from collections.abc import Iterator

import celery
import pytest
from celery import chain, chord, group

from celery_app.canvas_links import group_body
from kernel import InvalidArgument


@pytest.fixture
def app() -> Iterator[celery.Celery]:
    app = celery.Celery("t", set_as_current=False, backend="cache+memory://")
    yield app
    app.close()


def test_a_groups_own_link_error_replaces_its_tasks(app: celery.Celery) -> None:
    """Celery's ``group(fail.s(), tsum.s()).set(link_error=[g])``: each task's errbacks are
    the group's (the task's own ``link_error`` replaced), once each."""
    a = app.signature("t.a")
    own = a.clone(("own",))
    mine = a.clone()
    mine.link_error(own)
    body = group(mine, a.clone()).set(link_error=[app.signature("t.eb", ("group",))])
    made = group_body(body, "chord.body")
    assert [[e["args"] for e in m["errbacks"]] for m in made] == [[["group"]], [["group"]]]


def test_a_chord_in_a_group_body_may_have_a_group_body(app: celery.Celery) -> None:
    """``group(chord([a], group(b, c))).set(link_error=[g])``: the chord is its body's first
    task carrying the chord (its header, and the body's other tasks as ``group``); the
    group's link_error reaches each task of the chord's body, as Celery's chord moves it."""
    a = app.signature("t.a")
    inner = chord([a.clone((1, 1))], group(a.clone(("b",)), a.clone(("c",))))
    body = group(inner).set(link_error=[app.signature("t.eb", ("group",))])
    body.freeze()
    [made] = group_body(body, "chord.body")
    assert made["args"] == ["b"] and [m["args"] for m in made["chord"]["header"]] == [[1, 1]]
    [other] = made["chord"]["group"]
    assert other["args"] == ["c"]
    assert (
        [e["args"] for e in made["errbacks"]]
        == [["group"]]
        == [e["args"] for e in other["errbacks"]]
    )


def test_a_chain_in_a_group_body_with_its_own_link_error_is_refused_by_name(
    app: celery.Celery,
) -> None:
    a = app.signature("t.a")
    body = group(chain(a.clone(), a.clone()), a.clone()).set(link_error=[a.clone()])
    with pytest.raises(InvalidArgument) as refused:
        group_body(body, "chord.body")
    assert refused.value.field == "chord.body[0].options.link_error"


def test_a_chord_with_a_group_body_elsewhere_is_still_refused(app: celery.Celery) -> None:
    """Only a chord among a group body's tasks carries a group body: as a chain's step its
    body is still one task (the kernel's chord step), refused by name."""
    a = app.signature("t.a")
    inner = chord([a.clone()], group(a.clone(), a.clone()))
    with pytest.raises(InvalidArgument) as refused:
        group_body(group(chain(a.clone(), inner)), "chord.body")
    assert "group" in refused.value.message
