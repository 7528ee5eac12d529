"""A routed chord that grows: a generator's header, a member's ``add_to_chord``.

``chord(gen(), body)`` whose header is a generator (Celery keeps it lazy) dispatches its
members as the generator yields them, as Celery does: the kernel's chord is opened first
(its body stored, no member yet), each member enqueued in its own transaction as it is
yielded and counted into the chord, then the chord is closed with its size. Whichever
sees the chord closed with every member settled makes the body, once: the close, or the
last member's settle (kernel/jobs/chord_growth.py). A generator that raises, or yields a
member the kernel cannot take, abandons the chord (it fails: the body's errbacks are
made, the body never) and the caller gets the error. A caller that dies mid-generator
leaves its chord ``growing``: ``kernel why`` on a member says so.

``self.add_to_chord(sig)`` inside a routed run adds a routed task to the run's chord in
one fenced transaction (the run's lease checked): the chord's body waits for it too, its
result after the others'; a chord of routed tasks too (Celery's ``group(...) | tsum.s()``),
its body's end counted in its place. Another canvas added and ``lazy=True`` are refused by
name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from celery.canvas import Signature, maybe_signature
from celery.utils.functional import _regen

from adapters.task import running_context
from celery_app.canvas_links import member_link, unrolled
from celery_app.enqueue_routing import routed_call, routed_run
from celery_app.enqueueing import add_to_chord, enqueue_many, process_kernel
from kernel import InvalidArgument

__all__ = ["BOOKKEEPING", "add_member", "grown_chord", "lazy_header"]

#: Options Celery sets on a signature for its own bookkeeping of the group: the kernel
#: keeps the chord in its row and in the members' links.
BOOKKEEPING = ("group_id", "group_index", "chord", "root_id", "parent_id")

#: (members, index of the first) -> (their AsyncResults, their runs, the chords among
#: them: (index, link)).
RunsOf = Callable[[list[Signature], int], tuple[list[Any], list[dict[str, Any]], list[Any]]]


def lazy_header(tasks: Any) -> bool:
    """Whether a chord's header is a generator Celery keeps lazy (not a list)."""
    return isinstance(tasks, _regen)


def grown_chord(
    app: Any, tasks: Iterable[Any], chord: Mapping[str, Any], runs_of: RunsOf, routed: Any
) -> list[Any]:
    """Open ``chord`` (its id, body, result id), enqueue each member of ``tasks`` as it
    is yielded (``runs_of`` makes its run, ``routed`` says whether the kernel takes it),
    close it; the members' AsyncResults. Anything raised abandons the chord first."""
    group_id = str(chord["id"])
    enqueue_many(app, [], chord={**chord, "open": True})
    results: list[Any] = []
    try:
        for index, task in enumerate(tasks):
            member = maybe_signature(task, app=app).clone()
            if not routed(member):
                what = member.get("subtask_type") or f"task {member.task}, not routed"
                raise InvalidArgument(
                    f"chord header[{index}]",
                    f"a chord routed through the kernel (kernel_route_tasks) is made of "
                    f"routed tasks only, not a {what}: route them all, or none",
                )
            made, runs, nested = runs_of([member], index)
            enqueue_many(app, runs, chord={"id": group_id, "grow": "caller"}, nested=nested)
            results.extend(made)
    except BaseException:
        process_kernel(app).abandon_chord(group_id)
        raise
    process_kernel(app).close_chord(group_id)
    return results


def add_member(task: Any, sig: Any, lazy: bool) -> Any:
    """``self.add_to_chord(sig)`` of a routed run (module docstring): the added task's
    AsyncResult.

    Raises:
        InvalidArgument: ``lazy``, or ``sig`` is a canvas or a task not routed.
        LeaseLost: the run no longer holds its lease.
    """
    app = task.app
    if lazy:
        raise InvalidArgument(
            "add_to_chord.lazy",
            "a routed run adds to its chord at once (the kernel counts the member in as "
            "it makes it): call add_to_chord(sig) without lazy=True",
        )
    sig = maybe_signature(sig, app=app).clone()
    kind = sig.get("subtask_type")
    if kind not in (None, "chord") or not _routed(app, sig):
        what = f"a {kind} (a canvas as a chord's member)" if kind else f"task {sig.task}"
        raise InvalidArgument(
            "add_to_chord",
            f"{what} cannot be added to the chord of task {task.name}, which runs through "
            "the kernel: only a routed task (kernel_route_tasks), or a chord of them, is "
            "added",
        )
    result = sig.freeze()
    ctx = running_context()
    assert ctx is not None, "a kernel run's body has its context"
    if kind == "chord":  # its body's end takes its place, as Celery counts it
        add_to_chord(app, ctx.occurrence, [], [(0, member_link(sig, "add_to_chord"))])
        return result
    options = {k: v for k, v in sig.options.items() if k not in BOOKKEEPING}
    _, run = routed_run(sig.type, list(sig.args), dict(sig.kwargs), options)
    add_to_chord(app, ctx.occurrence, [{"task": sig.task, **run}])
    return result


def _routed(app: Any, sig: Signature) -> bool:
    """Whether a task is routed, or a chord's header's first task is."""
    if sig.get("subtask_type") == "chord":
        tasks = sig.tasks
        first = next(iter(unrolled([tasks] if isinstance(tasks, Mapping) else tasks)), sig.body)
        return _routed(app, maybe_signature(first, app=app))
    return sig.get("subtask_type") is None and routed_call(app, sig.task, sig.kwargs)
