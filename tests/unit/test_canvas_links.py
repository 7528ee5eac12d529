"""A routed call's canvas as kernel links (celery_app.canvas_links): the signatures the
kernel stores, read from the options Celery's ``_chain.run`` gives the first step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import celery
import pytest
from celery import chain, group

from celery_app.canvas_links import links
from celery_app.enqueueing import with_settings
from kernel import InvalidArgument


@pytest.fixture
def app() -> Iterator[celery.Celery]:
    app = celery.Celery("t", set_as_current=False, backend="cache+memory://")
    yield app
    app.close()


def _first_step_options(app: celery.Celery, canvas: Any) -> dict[str, Any]:
    """The options Celery's chain passes to its first step's ``apply_async``."""
    seen: list[dict[str, Any]] = []

    class Spy(celery.Task):  # type: ignore[misc]
        def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
            seen.append(options)
            return self.AsyncResult(options["task_id"])

    def add(x: int = 0, y: int = 0) -> int:
        return x + y

    app.task(name="t.a", base=Spy, shared=False)(add)
    canvas.apply_async()
    return seen[0]


def test_a_group_as_the_chains_last_step_is_its_members_as_the_steps_callbacks(
    app: celery.Celery,
) -> None:
    """``chain(a, group(b, c))``: Celery applies the group with the previous result, each
    member given it first; as links, each member is a callback of the step before, keyed
    by the task id Celery froze for it (the caller's GroupResult reads those ids)."""
    a = app.signature("t.a")
    canvas = chain(a.clone((1, 1)), group(a.clone((1,)), chain(a.clone((2,)), a.clone((3,)))))
    frozen = canvas.freeze()
    callbacks, errbacks = links(_first_step_options(app, canvas))
    assert errbacks == []
    [member_one, member_chain] = callbacks
    group_result = frozen  # the chain's result: its last step's, the group's
    assert [r.id for r in group_result.results] == [
        member_one["options"]["task_id"],
        member_chain["rest"][0]["options"]["task_id"],
    ]
    assert (member_one["task"], member_one["args"], member_one["callbacks"]) == ("t.a", [1], [])
    # A chain as a member: its first step, carrying the rest of it.
    assert member_chain["args"] == [2] and member_chain["rest"][0]["args"] == [3]


def test_a_group_as_a_link_is_its_members(app: celery.Celery) -> None:
    a = app.signature("t.a")
    callbacks, _ = links({"link": group(a.clone((1,)), a.clone((2,)))})
    assert [s["args"] for s in callbacks] == [[1], [2]]


def test_a_chord_whose_body_is_a_group_is_refused_by_name(app: celery.Celery) -> None:
    """Celery's ``group | group`` in a chain is a chord whose body is a group: the kernel's
    chord makes one body, so it is refused where it is applied, naming it."""
    a = app.signature("t.a")
    canvas = chain(a.clone((1, 1)), group(a.clone(), a.clone()), group(a.clone(), a.clone()))
    with pytest.raises(InvalidArgument) as refused:
        links(_first_step_options(app, canvas))
    assert refused.value.field == "chain[0].body"
    assert "group" in refused.value.message


def test_a_chords_member_that_is_a_chain_is_its_first_step_the_rest_continuing_it(
    app: celery.Celery,
) -> None:
    """A kernel chord counts its members' ends: a chain's is its last step's (the kernel
    makes each next step of its ``rest`` continuing the one before: it takes its place in
    the chord), without the ``chord`` Celery's freeze gives it (the kernel counts that
    chord)."""
    a = app.signature("t.a")
    canvas = chain(
        a.clone((1, 1)), group(a.clone(), chain(a.clone((2,)), a.clone((3,)))), a.clone()
    )
    [step] = links(_first_step_options(app, canvas))[0]
    member = step["chord"]["header"][1]
    [second] = member["rest"]
    assert (member["args"], second["args"], member["callbacks"]) == ([2], [3], [])


def test_a_chords_member_that_is_a_chain_ending_in_a_group_shares_its_place(
    app: celery.Celery,
) -> None:
    """Each member of the group the chain ends with takes a share of the chain's place
    (``shares``), as Celery counts a chain ending in a group by the group's members."""
    a = app.signature("t.a")
    member = chain(a.clone((1,)), group(a.clone((2,)), a.clone((3,))))
    [step] = links({"link": celery.chord([a.clone(), member], a.clone())})[0]
    first = step["chord"]["header"][1]
    assert [(g["args"], g.get("shares")) for g in first["callbacks"]] == [([2], True), ([3], True)]


def test_a_step_of_a_chord_celery_counts_is_refused(app: celery.Celery) -> None:
    """A step carrying Celery's ``chord`` (a member of a chord Celery counts in its
    backend) never reports to it: refused, not dropped (the chord would wait forever)."""
    a = app.signature("t.a")
    step = a.clone((1,)).set(chord=a.clone())
    with pytest.raises(InvalidArgument) as refused:
        links({"chain": [group(step, a.clone())]})
    assert refused.value.field == "chain[0][0].options.chord"


def test_a_chord_whose_body_is_a_chord_is_the_kernels_chord_then(app: celery.Celery) -> None:
    """``a | group(b, b) | group(c, c) | d``: Celery's chord whose body is a chord, as the
    kernel's chord step with ``then`` (its body's chord), whether Celery froze it or not."""
    a = app.signature("t.a")
    canvas = a.clone((1, 0)) | group(a.clone(), a.clone()) | group(a.clone(), a.clone()) | a.clone()
    [step] = links(_first_step_options(app, canvas))[0]
    assert len(step["chord"]["header"]) == 2 and len(step["chord"]["then"]["header"]) == 2
    assert "chord" not in step["chord"]["then"]
    frozen = celery.chord([a.clone()], celery.chord([a.clone(), a.clone()], a.clone()))
    body_result = frozen.freeze()
    [again] = links({"link": frozen})[0]
    assert again["options"]["task_id"] == body_result.id  # the id the caller holds
    assert len(again["chord"]["header"]) == 1 and len(again["chord"]["then"]["header"]) == 2


def test_a_chord_step_whose_body_is_a_chain_fails_under_the_chains_id(app: celery.Celery) -> None:
    """Its body is the chain's first step, the rest following it; its failure is written
    under the id its caller holds, the chain's last step's (``result_id``)."""
    a = app.signature("t.a")
    step = celery.chord([a.clone((1,))], chain(a.clone(), a.clone()))
    chain_id = step.freeze().id
    [made] = links({"link": step})[0]
    assert made["chord"]["result_id"] == chain_id
    assert len(made["rest"]) == 1  # the chain's second step follows its first


def test_a_long_chain_is_flat_and_each_step_carries_its_task_s_settings(
    app: celery.Celery,
) -> None:
    """A chain of 60 steps: its first step's link carries the 58 after it as its flat
    ``rest`` (the kernel refuses JSON nested deeper than 64 levels), each with its own
    task's settings, as a callback's are."""

    def limited() -> int:
        return 1

    app.task(name="t.limited", shared=False, max_retries=7)(limited)
    steps = [app.signature("t.limited", immutable=True) for _ in range(60)]
    [next_step] = links(_first_step_options(app, chain(app.signature("t.a"), *steps)))[0]
    assert len(next_step["rest"]) == 59 and "rest" not in next_step["rest"][-1]
    [made] = with_settings(app, [next_step])
    assert {s["settings"]["max_attempts"] for s in [made, *made["rest"]]} == {8}


def test_a_chord_step_whose_body_is_a_chain_is_followed_by_that_chain_s_rest(
    app: celery.Celery,
) -> None:
    """``chain(a, chord([b], chain(c, d)), e)``: the rest is flat, the body's chain first."""
    a = app.signature("t.a")
    canvas = chain(
        a.clone((1,)),
        celery.chord([a.clone((2,))], chain(a.clone((3,)), a.clone((4,)))),
        a.clone((5,)),
    )
    [step] = links(_first_step_options(app, canvas))[0]
    assert step["args"] == [3] and "chord" in step
    assert [s["args"] for s in step["rest"]] == [[4], [5]]
    assert all("rest" not in s for s in step["rest"])


def test_a_chord_whose_group_body_a_step_follows_is_a_chord_of_that_group(
    app: celery.Celery,
) -> None:
    """``chain(chord(h, group(b, c)), chord(h2, d))`` (Celery's
    test_header_failure_fails_the_chords_after_a_group_body): the group's members are a
    chord whose body is the next chord (``then``), given their results, as Celery runs it;
    the end is the chain's last step, under whose id the chain's failure is written."""
    a = app.signature("t.a")
    first = celery.chord([a.clone((1, 1)), a.clone((2, 2))], group(a.clone((1,)), a.clone((2,))))
    canvas = chain(a.clone((0, 0)), first, celery.chord([a.clone((3,)), a.clone((4,))], a.clone()))
    last = canvas.freeze()
    [step] = links(_first_step_options(app, canvas))[0]
    outer = step["chord"]
    headers = [[m["args"] for m in outer["header"]]]
    headers += [[m["args"] for m in outer["then"]["header"]]]
    headers += [[m["args"] for m in outer["then"]["then"]["header"]]]
    assert headers == [[[1, 1], [2, 2]], [[1], [2]], [[3], [4]]]
    assert step["options"]["task_id"] == last.id


def test_a_chords_member_that_is_a_chord_with_a_group_body_is_refused_by_name(
    app: celery.Celery,
) -> None:
    """Its body's end would be several runs: refused when applied, never a hang."""
    a = app.signature("t.a")
    inner = celery.chord([a.clone((1,))], group(a.clone((2,)), a.clone((3,))))
    with pytest.raises(InvalidArgument) as refused:
        links({"link": celery.chord([a.clone(), inner], a.clone())})
    assert refused.value.field == "link[0].header[1].body"
