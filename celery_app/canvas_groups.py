"""A routed group or chord through the kernel: its members made in one transaction.

``group(add.s(1, 1), add.s(2, 2)).delay()`` whose tasks are all routed
(``kernel_route_tasks``) enqueues every member in one :func:`celery_app.enqueue_many`,
each keyed by the task id Celery froze for it, and answers Celery's ``GroupResult``
under the group id (each member's result is the worker's to write, as for any routed
call). ``chord(header)(body)`` over such a header does the same with the kernel's chord:
the settle of the last member to succeed makes the body (its results in group order
first), exactly once; a member that fails for good fails the chord and makes the body's
errbacks instead (kernel/occurrences/chains.py). It answers the body's ``AsyncResult``,
its parent the header's ``GroupResult``, as Celery's chord does. Celery's own chord
machinery (``apply_chord``, ``chord_unlock``, ``on_chord_part_return``) is not used: a
second path to the body would run it twice.

A chord whose body is a chord is the kernel's chord with ``then`` (the first chord's
settle makes the second's members: kernel/spec/enqueue_request.py). A group's or a chord's
member may be a chain led by a routed task: that task is enqueued with the rest as its
links, under the ids Celery froze (the chain's result, its last step's, is in the
GroupResult); in a chord, each next step takes the member's place and the chain's end
counts the chord down (kernel/occurrences/chains.py), without the ``chord`` option
Celery's freeze gives it. Nested groups are unrolled into their members, as Celery does.
A chord's body may be a chain: its first step, carrying the rest (canvas_links.py), its
failure written under the chain's id, its last step's, which the caller holds; or a
group: each of its members made by the last member's settle, the results first, each
failed with its own errbacks if the header fails (canvas_links.group_body). A group's or
a chord's member may be a chord of routed tasks, or a chain led by one: the kernel makes
that chord beside the members (``nested``), and in a chord its body's end takes the
member's place, as Celery counts a chord by its body; a chain member ending in a group
gives each of the group's members a place. A group whose tasks are partly routed, and a
chord's options a kernel chord cannot carry are refused when applied, naming them. An
empty header's body is made at once, with [] as its first argument. A header that is a
generator grows the chord member by member as it yields them (celery_app/canvas_growth.py).
Groups and chords of tasks none of which is routed are Celery's own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from celery.canvas import Signature, _chord, group, maybe_signature
from celery.result import GroupResult
from celery.utils import uuid

from celery_app.canvas_growth import BOOKKEEPING, grown_chord, lazy_header
from celery_app.canvas_links import (
    chord_member_end,
    group_body,
    link_signature,
    member_link,
    unrolled,
)
from celery_app.enqueue_routing import routed_call, routed_run
from celery_app.enqueueing import enqueue_many
from celery_app.step_options import refuse_options
from kernel import InvalidArgument

__all__ = ["hook_canvas"]


def _members(app: Any, tasks: Sequence[Any], where: str) -> list[Signature] | None:
    """The group's signatures when every one is a routed task's, None when none is
    (Celery's own group).

    Raises:
        InvalidArgument: some are routed and some not, or a member is a canvas.
    """
    # Copies, as Celery's group takes them: one signature listed twice is two members.
    members = [maybe_signature(task, app=app).clone() for task in tasks]
    # A chunks' members are celery.starmap calls (xstarmap) over its task. A member may
    # be a chain led by a routed task (its rest: that task's links), or a chord (or a
    # chain led by one) of routed tasks: the kernel's chord (:func:`_runs`).
    are_routed = [_routed_member(app, m) for m in members]
    if not any(are_routed):
        return None
    for index, (member, is_routed) in enumerate(zip(members, are_routed, strict=True)):
        if not is_routed:
            what = member.get("subtask_type") or f"task {member.task}, not routed"
            raise InvalidArgument(
                f"{where}[{index}]",
                f"a {where} routed through the kernel (kernel_route_tasks) is made of "
                f"routed tasks only, not a {what}: route them all, or none",
            )
    return members


def _empty_chain(task: Any) -> bool:
    return bool(task.get("subtask_type") == "chain" and not task.get("kwargs", {}).get("tasks"))


def _routed_member(app: Any, member: Signature) -> bool:
    kind = member.get("subtask_type")
    if kind == "chain" and member.tasks:
        member = maybe_signature(member.tasks[0], app=app)
        kind = member.get("subtask_type")
    if kind == "chord":  # routed when its header's first task is (else its body)
        header = [t for t in unrolled(_header(member)) if not _empty_chain(t)]
        return _routed_member(app, maybe_signature((header or [member.body])[0], app=app))
    return kind in (None, "xmap", "xstarmap") and routed_call(app, member.task, member.kwargs)


def _header(chord: Signature) -> list[Any]:
    """A chord's header as a list (frozen, it is a group: its tasks)."""
    tasks = chord.tasks
    return [tasks] if isinstance(tasks, Mapping) else list(tasks)


def _led_by_chord(app: Any, member: Signature) -> bool:
    """Whether a member is a chord, or a chain whose first step is one."""
    if member.get("subtask_type") == "chain" and member.tasks:
        member = maybe_signature(member.tasks[0], app=app)
    return bool(member.get("subtask_type") == "chord")


def _runs(
    members: Sequence[Signature],
    group_id: str,
    partial_args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    options: Mapping[str, Any],
    start: int = 0,
    in_chord: bool = False,
) -> tuple[list[Any], list[dict[str, Any]], list[tuple[int, Any]]]:
    """Each member frozen under ``group_id`` (its task id, as Celery's group freezes it;
    the first at ``start`` in the group) and its enqueue parameters; (their
    AsyncResults, the runs, the chords among them: (index among them, link) of each, a chord or a
    chain led by one, which the kernel makes with its members)."""
    results, runs, nested = [], [], []
    for index, member in enumerate(members, start):
        results.append(member.freeze(group_id=group_id, group_index=index))
        if _led_by_chord(member.app, member):
            link = _nested(member, index, partial_args, kwargs, options, in_chord)
            nested.append((index - start, link))  # its place among these members
            continue
        rest: list[Any] = []
        if member.get("subtask_type") == "chain":
            # Its first step runs, the rest follows as that step's links: the steps as
            # Celery's chain.run applies them (frozen, the next one last). A chord's
            # member ends at its last step, which the kernel's chord counts.
            steps, _ = member._frozen
            member, rest = steps[-1], list(steps[:-1])
            if rest and in_chord:
                rest[0] = chord_member_end(rest[0], f"chord header[{index}]")
        # As Celery's group applies a member: the call's options over the member's own,
        # the call's arguments before the member's unless it is immutable.
        merged = {**member.options, **options}
        for name in BOOKKEEPING:
            merged.pop(name, None)
        merged["task_id"] = member.options.get("task_id") if rest else results[-1].id
        if rest:
            merged["chain"] = rest
        args = list(member.args) if member.immutable else [*partial_args, *member.args]
        task = member.type
        _, run = routed_run(task, args, {**member.kwargs, **(kwargs or {})}, merged)
        # The member's self.request.group and group_index, and the group_id of its result.
        run["request"] = {**run["request"], "group_id": group_id, "group_index": index}
        runs.append({"task": task.name, **run})
    return results, runs, nested


def _nested(
    member: Signature,
    index: int,
    partial_args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    options: Mapping[str, Any],
    in_chord: bool,
) -> Any:
    """A member that is a chord (or a chain led by one) as the kernel's chord link.

    Raises:
        InvalidArgument: the call gives it arguments or options (its tasks take their own).
    """
    where = f"{'chord header' if in_chord else 'group'}[{index}]"
    if partial_args or kwargs:
        raise InvalidArgument(
            f"{where}.{'args' if partial_args else 'kwargs'}",
            "a chord as a group's member routed through the kernel (kernel_route_tasks) "
            "takes no arguments from the group's call; give them to its tasks",
        )
    refuse_options(options, set(), where)
    return member_link(member, where) if in_chord else link_signature(member, where)


def _chord_members(app: Any, tasks: Any, body: Signature) -> Iterable[Any] | None:
    """A chord's header as the kernel makes it: its members' signatures (a list), the
    generator itself when it is one led by a routed task (:mod:`celery_app.canvas_growth`),
    none for an empty header whose body is routed (the body made at once with []); None:
    Celery's own chord."""
    if not getattr(app, "_kernel_installed", False):
        return None
    if lazy_header(tasks):
        led = _led_by_routed(app, tasks)
        if led is not None:
            return tasks if led else None
        tasks = []
    # An empty chain is no member, as in Celery's chord; nested groups are unrolled.
    tasks = [task for task in unrolled(tasks) if not _empty_chain(task)]
    if not tasks:
        return [] if _routed_member(app, body) else None
    return _members(app, list(tasks), "chord header")


def _led_by_routed(app: Any, tasks: Any) -> bool | None:
    """Whether a lazy header's (a generator's) first member is a routed task's, reading
    no further than Celery would (its lazy list keeps what was read: iterating again
    starts at the first); None when it is empty."""
    first = next(iter(tasks), None)
    if first is None:
        return None
    return _routed_member(app, maybe_signature(first, app=app))


def _group_apply_async(celerys: Any) -> Any:
    def apply_async(
        self: group,
        args: Any = None,
        kwargs: Any = None,
        add_to_parent: bool = True,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        **options: Any,
    ) -> Any:
        app = self.app
        members = (
            None
            if not getattr(app, "_kernel_installed", False)
            or app.conf.task_always_eager
            or link is not None
            or link_error is not None  # Celery's own TypeError names them
            # A generator of tasks not routed: Celery's own, which reads it lazily.
            or (lazy_header(self.tasks) and not _led_by_routed(app, self.tasks))
            # An empty chain is no member, as in Celery's group.
            else _members(app, [t for t in unrolled(self.tasks) if not _empty_chain(t)], "group")
        )
        if members is None:
            return celerys(self, args, kwargs, add_to_parent, producer, link, link_error, **options)
        if options.get("chord") is not None:
            raise InvalidArgument(
                "chord",
                "a chord whose header is a nested group is not made durable yet; give "
                "the chord its tasks as a list",
            )
        options, group_id, _ = self._freeze_gid(options)
        results, runs, nested = _runs(members, group_id, args or (), kwargs, options)
        enqueue_many(app, runs, nested=nested)
        if len(results) == 1 and isinstance(results[0], GroupResult):
            # As Celery's group(a | group(b, c)): the chain's own GroupResult.
            return results[0]
        return app.GroupResult(group_id, results)

    apply_async._kernel_routed = True  # type: ignore[attr-defined]
    return apply_async


def _chord_run(celerys: Any) -> Any:
    def run(
        self: _chord,
        header: group,
        body: Signature,
        partial_args: Any,
        app: Any = None,
        interval: Any = None,
        countdown: Any = 1,
        max_retries: Any = None,
        eager: bool = False,
        task_id: str | None = None,
        kwargs: Any = None,
        header_delay: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        app = app or self._get_app(body)
        members = _chord_members(app, header.tasks, body)
        if members is None:
            return celerys(
                self, header, body, partial_args, app, interval, countdown, max_retries,
                eager, task_id, kwargs, header_delay, **options,
            )  # fmt: skip
        group_id = header.options.get("task_id") or uuid()
        options = dict(self.options, **options)
        delay = {
            key: (header_delay or {}).get(key, options.get(key)) for key in ("countdown", "eta")
        }
        for key in ("countdown", "eta", "task_id", "chain", "chord"):
            options.pop(key, None)
        # The chord's options (link, link_error, queue...) are its body's, as in Celery.
        body = self._add_body_callbacks(body, options)
        body.options.update(self._body_options(options))
        # A chord: the kernel's `then`; a chain: its first step carrying the rest.
        if body.get("subtask_type") not in (None, "chord", "chain", "group"):
            raise InvalidArgument(
                "chord.body",
                f"a {body['subtask_type']} as the body of a chord routed through the kernel "
                "(kernel_route_tasks) is not made durable yet; give it one task, or "
                "chain the rest after that task",
            )
        body_result = body.freeze(task_id or uuid(), group_id=group_id)

        def runs_of(some: list[Signature], start: int) -> Any:
            delays = {k: v for k, v in delay.items() if v is not None}
            return _runs(some, group_id, partial_args or (), kwargs, delays, start, in_chord=True)

        # The caller holds the body's result: a chain's is its last step's, under which
        # the kernel writes the chord's failure (result_id).
        chord = {
            "id": group_id,
            "body": _body(body),
            "result_id": body_result.id,
        }
        if lazy_header(members):  # a generator's: each member made as it is yielded
            routed = partial(_routed_member, app)
            results = grown_chord(app, members, chord, runs_of, routed)
        else:
            results, runs, nested = runs_of(list(members), 0)
            enqueue_many(app, runs, chord=chord, nested=nested)
        body_result.parent = GroupResult(group_id, results, app=app)
        return body_result

    run._kernel_routed = True  # type: ignore[attr-defined]
    return run


def _body(body: Signature) -> Any:
    """A chord's body as the kernel's chord carries it: one link, or a group's members
    (each given the members' results first, as Celery's group body is)."""
    if body.get("subtask_type") != "group":
        return link_signature(body, "chord.body")
    return group_body(body, "chord.body")


_hook_lock = threading.Lock()


def hook_canvas() -> None:
    """Route ``group.apply_async`` and ``chord.run`` of routed tasks (module docstring),
    for apps the kernel is installed on; idempotent."""
    with _hook_lock:
        if getattr(group.apply_async, "_kernel_routed", False):
            return
        group.apply_async = _group_apply_async(group.apply_async)
        _chord.run = _chord_run(_chord.run)
