"""A routed call's canvas options as kernel links: ``link``, ``link_error`` and a chain's
rest (``options['chain']``, as Celery's ``_chain.run`` passes it to the first step's
``apply_async``) become the plain JSON signatures the kernel stores with the occurrence
and enqueues when it settles (kernel/spec/enqueue_request.py), whether their tasks are
routed or not: the kernel makes each step durably, exactly once.

A chord among the steps (``chain(a, chord(header, body), d)``, and a group followed by a
task, which Celery makes a chord) is one link too: the body's signature carrying the
chord's id and header (kernel/spec/enqueue_request.py); the step before it makes the
members, the last member the body, and the steps after it follow the body.

A group as a chain's last step (``chain(a, group(b, c))``), or as a ``link``, is its
members: each a callback of the step before, given its result first as Celery's group
gives it, keyed by the task id Celery froze for it (the ids the caller's GroupResult
reads). A chain among the steps or in such a group is its first step, carrying the rest
of it flat (``rest``: its depth does not grow with its length); the kernel makes each
next step continuing the one before. A chord's member may be such a chain (its next steps
take its place in the chord, its end counts it down; a group it ends with: each of its members
takes a share of it, as Celery counts them), a chord (its body takes its place) or a group
(unrolled into members).

What a link cannot carry is refused when the canvas is applied, naming it: a group
followed by a step that Celery did not make a chord, a chord whose body is a group
but as a task of a chord's group body (:func:`group_body`; a body that is a chord, Celery's
``group | group | task``, is the kernel's chord step ``then``), a step of a chord Celery
counts itself (its
``chord`` option, but for a chord member's end, whose chord is the kernel's), and step
options the kernel does not honour (``expires``, ...). A step's ``eta`` is stored as ISO
text (a link is JSON), made aware in the app's zone as Celery reads a naive one. A chord
whose body is a chain (as a step, or applied: canvas_groups.py) carries the chain's id,
its last step's, as its ``result_id``: its failure is written under the id the caller
holds. A chord step's own ``link`` and ``link_error`` are its body's, as Celery's chord
moves them there.

A signature's stamps (the options its ``stamped_headers`` names, Celery's stamping) are its
run's request fields (``stamped_headers``, ``stamps``), as its stock message's headers are;
a group's or chain's own are its tasks' already (the stamping visits each). An errback
Celery clones immutable (``clone(immutable=True)``: the flag among its options) is.

A ``self.replace(sig)`` inside a kernel run is one link too (:func:`replacement_signature`):
a task, a chain (each step's next step first among its callbacks) or a chord.
(``replaced_task_nesting`` is the kernel's to count: kernel/jobs/replacement.py.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from celery.utils import uuid
from celery.utils.time import maybe_make_aware

from celery_app.step_options import celery_json, many, refuse_options, stamps_request
from kernel import InvalidArgument

__all__ = [
    "CANVAS_OPTIONS",
    "chord_member_end",
    "group_body",
    "link_signature",
    "links",
    "member_link",
    "replacement_signature",
    "unrolled",
]

#: The apply_async options this module turns into links.
CANVAS_OPTIONS = frozenset({"link", "link_error", "chain"})
#: A step's options a kernel link honours.
_STEP_OPTIONS = ("task_id", "queue", "countdown", "eta", "priority")


def links(options: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(callbacks, errbacks) of a routed call's ``options``: its ``link`` signatures and
    the chain's next step (carrying the steps after it), and its ``link_error`` ones.

    Raises:
        InvalidArgument: a step is a group, chord or chain, or has an option a link
            cannot honour (``field`` names where).
    """
    callbacks = [
        made for i, s in enumerate(many(options.get("link"))) for made in _made(s, f"link[{i}]")
    ]
    errbacks = [
        made
        for i, s in enumerate(many(options.get("link_error")))
        for made in _made(s, f"link_error[{i}]")
    ]
    # Celery keeps the rest reversed: the next step is the list's last.
    rest = _chained(list(reversed(options.get("chain") or ())), "chain")
    if len(rest) == 1:
        rest[0]["continues"] = True  # in a chord, it takes the call's place
    return rest + callbacks, errbacks


def _chained(
    steps: Sequence[Any], where: str, errbacks: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """A chain's ``steps`` as the links its first step's run makes: that step, carrying the
    others as its flat ``rest`` (its depth does not grow with the chain's length), or a
    last group's members (the callbacks of the step before it); ``errbacks``: the chain's
    ``link_error``, every step's as Celery's chain gives it."""
    made = [_made(step, f"{where}[{i}]") for i, step in enumerate(_folded(steps))]
    for i, one in enumerate(made[:-1]):
        if len(one) != 1:
            raise InvalidArgument(
                f"{where}[{i}]",
                "a group followed by a step is a chord: build it with chord() or "
                "group(...) | task, as Celery's chain does",
            )
    # A step with a rest of its own (a chord whose body is a chain) is followed by it.
    flat = [step for one in made if len(one) == 1 for step in (one[0], *one[0].pop("rest", ()))]
    group = made[-1] if made and len(made[-1]) != 1 else []
    for step in group:  # in a chord, each takes a share of the chain's place
        step["shares"] = True
    for step in (*flat, *group):
        step["errbacks"].extend(errbacks)
    if not flat:
        return group
    flat[-1]["callbacks"][:0] = group
    if flat[1:]:
        flat[0]["rest"] = flat[1:]
    return flat[:1]


def _folded(steps: Sequence[Any]) -> list[Any]:
    """A chain's steps with a chord whose body is a group, followed by a step, made one
    chord whose body is the chord of that group and the step (Celery runs the step after
    the group's members, given their results: its ``group | step``)."""
    folded: list[Any] = []
    for step in steps:
        kwargs = (folded[-1].get("kwargs") or {}) if folded else {}
        if (
            folded
            and folded[-1].get("subtask_type") == "chord"
            and ((kwargs.get("body") or {}).get("subtask_type") == "group")
        ):
            body = {"task": "celery.chord", "subtask_type": "chord", "options": {},
                    "kwargs": {"header": kwargs["body"], "body": step}}  # fmt: skip
            folded[-1] = {**folded[-1], "kwargs": {**kwargs, "body": body}}
            continue
        folded.append(step)
    return folded


def _made(sig: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """What a signature among the links makes: a group its members, a chain its first
    step (carrying the rest), anything else one link (:func:`link_signature`)."""
    kind = sig.get("subtask_type")
    if kind not in ("group", "chain"):
        return [link_signature(sig, where)]
    # The group's id or the chain's (its last step's) is in its members' keys: nothing
    # else of its own options is honoured but a chain's link_error.
    options = dict(sig.get("options") or {})
    refuse_options(options, {"task_id", *(("link_error",) if kind == "chain" else ())}, where)
    tasks = list((sig.get("kwargs") or {}).get("tasks") or ())
    if kind == "chain":
        errbacks = links({"link_error": options.get("link_error")})[1]
        return _chained(_steps(sig), f"{where}.tasks", errbacks)
    return [made for i, task in enumerate(tasks) for made in _made(task, f"{where}[{i}]")]


def _steps(chain: Mapping[str, Any]) -> list[Any]:
    """A chain's steps: a frozen one's are those it froze (a group followed by a task
    is a chord there)."""
    frozen = getattr(chain, "_frozen", None)
    return (
        list(reversed(frozen[0]))
        if frozen
        else list((chain.get("kwargs") or {}).get("tasks") or ())
    )


def unrolled(tasks: Sequence[Any]) -> list[Any]:
    """A chord's header with its nested groups' members in their place, as Celery's chord
    unrolls them."""
    return [
        member
        for task in tasks
        for member in (
            unrolled((task.get("kwargs") or {}).get("tasks") or ())
            if task.get("subtask_type") == "group"
            else [task]
        )
    ]


def chord_member_end(step: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The last step of a chord's member that is a chain, without the ``chord`` Celery's
    freeze gives it (the chord's body: the kernel counts that chord, at this step's end);
    a group's members alike (each takes a share of the member's place, as Celery counts a
    chain ending in a group by the group's members)."""
    kind = step.get("subtask_type")
    kwargs = step.get("kwargs") or {}
    if kind == "chord":  # its body is the member's end
        step = {**step, "kwargs": {**kwargs, "body": _unchorded(kwargs.get("body") or {})}}
    elif kind == "group":
        tasks = [chord_member_end(t, where) for t in kwargs.get("tasks") or ()]
        step = {**step, "kwargs": {**kwargs, "tasks": tasks}}
    return _unchorded(step)


def _unchorded(sig: Mapping[str, Any]) -> dict[str, Any]:
    return {**sig, "options": {k: v for k, v in (sig.get("options") or {}).items() if k != "chord"}}


def member_link(sig: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A chord's member as the link that starts it: a task, a chord (its body counts the
    chord down in its place), or a chain's first step, its next steps continuing it (the
    chain's end counts the chord down in its place)."""
    kind = sig.get("subtask_type")
    if kind not in (None, "chain", "chord"):
        raise InvalidArgument(
            where,
            f"a chord's member that is a {kind} is not made durable through the kernel "
            "(kernel_route_tasks); give the chord tasks, chains or chords",
        )
    if kind != "chain":  # a chord: its body's end is the member's
        return link_signature(chord_member_end(sig, where), where)
    steps = _steps(sig)
    if steps:
        steps[-1] = chord_member_end(steps[-1], f"{where}.tasks[{len(steps) - 1}]")
    options = {k: v for k, v in (sig.get("options") or {}).items() if k != "chord"}
    return link_signature({**sig, "options": options, "kwargs": {"tasks": steps}}, where)


def group_body(sig: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """A chord's body that is a group as the kernel's chord makes it: its tasks' links
    (a chord among them: :func:`_chord_step`, its body a group too). The group's own
    ``link_error`` replaces its tasks', as Celery's group passes it to each one's
    ``apply_async`` (a chord's: on to its body).

    Raises:
        InvalidArgument: as :func:`link_signature`, or it has its own ``link_error`` and
            a task of it is a chain or a group (whose steps Celery gives it to alike).
    """
    errbacks = (sig.get("options") or {}).get("link_error")
    made = []
    for i, task in enumerate((sig.get("kwargs") or {}).get("tasks") or ()):
        kind, at = task.get("subtask_type"), f"{where}[{i}]"
        if errbacks is not None and kind not in (None, "chord"):
            raise InvalidArgument(
                f"{at}.options.link_error", f"a {kind} in a chord's group body that has its "
                "own link_error is not made durable through the kernel (kernel_route_tasks); "
                "link the errbacks to the group's tasks instead",
            )  # fmt: skip
        if errbacks is not None:
            task = {**task, "options": {**(task.get("options") or {}), "link_error": errbacks}}
        made.append(_chord_step(task, at, True) if kind == "chord" else link_signature(task, at))
    return made


def _chord_step(sig: Mapping[str, Any], where: str, in_group: bool = False) -> dict[str, Any]:
    """A chord among a canvas's steps as one link: its body's, carrying the chord's id
    (Celery's group id, frozen with the chain) and its header's members; ``in_group``
    (a member of a chord's group body), its body may be a group: its first member
    carrying the others (``group``)."""
    options = dict(sig.get("options") or {})
    refuse_options(options, {"task_id", "link", "link_error"}, where)
    kwargs = sig.get("kwargs") or {}
    if kwargs.get("kwargs"):
        raise InvalidArgument(
            f"{where}.kwargs", "a chord step's own kwargs are not passed on; give them to its body"
        )
    header = kwargs.get("header") or ()
    # Frozen, its header is a group whose id its members' results name.
    frozen_id = (
        (header.get("options") or {}).get("task_id") if isinstance(header, Mapping) else None
    )
    if isinstance(header, Mapping):  # a group: its tasks
        header = (header.get("kwargs") or {}).get("tasks") or ()
    group_id = options.get("task_id") or frozen_id or uuid()
    members = [member_link(m, f"{where}.header[{i}]") for i, m in enumerate(unrolled(header))]
    raw_body = kwargs.get("body") or {}
    grouped = in_group and raw_body.get("subtask_type") == "group"
    bodies = group_body(raw_body, f"{where}.body") if grouped else []
    body = bodies[0] if bodies else link_signature(raw_body, f"{where}.body")
    # The chord's own link and link_error are its body's, as Celery's chord moves them
    # (a chain's link, on its last step; a chord body's link_error, when a header fails;
    # a group body's link_error, on each of its tasks).
    callbacks, errbacks = links(
        {"link": options.get("link"), "link_error": options.get("link_error")}
    )
    body["callbacks"].extend(callbacks)
    for one in bodies or [body]:
        one["errbacks"].extend(errbacks)
    chord: dict[str, Any] = {"id": group_id, "header": members}
    if grouped:
        chord["group"] = bodies[1:]
    chain_id = (raw_body.get("options") or {}).get("task_id")
    if raw_body.get("subtask_type") == "chain" and chain_id:
        # The chord's failure is written under the id its caller holds: a chain's is its
        # last step's, not its first's (the body's own).
        chord["result_id"] = chain_id
    if "chord" in body:  # Celery's group | group | task: this chord's body is a chord
        chord["then"] = body["chord"]
    return {**body, "chord": chord}


def link_signature(sig: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One Celery signature (a Signature is a dict) as a kernel link (a step, a link, a
    chord's body); InvalidArgument as :func:`links`, ``where`` first in its field."""
    kind = sig.get("subtask_type")
    if kind == "chord":
        return _chord_step(sig, where)
    made = _made(sig, where) if kind == "chain" else []
    if len(made) == 1:
        return made[0]
    if kind:
        what = "a group where one task must run (a chord's body: Celery's group | group)"
        raise InvalidArgument(
            where,
            f"{what if kind in ('group', 'chain') else f'a {kind}'} inside a canvas routed "
            "through the kernel (kernel_route_tasks) is not made durable; apply it on its "
            "own, or leave its tasks out of kernel_route_tasks",
        )
    options = dict(sig.get("options") or {})
    refuse_options(options, {*_STEP_OPTIONS, *CANVAS_OPTIONS, "immutable"}, where)
    if isinstance(options.get("eta"), datetime):
        options["eta"] = maybe_make_aware(options["eta"]).isoformat()
    nested, errbacks = links({name: options.get(name) for name in CANVAS_OPTIONS})
    return {
        "task": sig.get("task"),
        "args": celery_json(list(sig.get("args") or ())),
        "kwargs": celery_json(dict(sig.get("kwargs") or {})),
        # Celery's ``sig.clone(immutable=True)`` (a chord's errback on its header) puts
        # the flag among the options: the signature then takes no argument.
        "immutable": bool(sig.get("immutable") or options.get("immutable")),
        "options": {name: options[name] for name in _STEP_OPTIONS if options.get(name) is not None},
        "callbacks": nested,
        "errbacks": errbacks,
        **stamps_request(options),
    }


def replacement_signature(sig: Mapping[str, Any]) -> dict[str, Any]:
    """The signature of a kernel run's ``self.replace(sig)`` as one kernel link: a task
    or a chord as :func:`link_signature` makes them, a chain as its first step carrying
    the others (its ``link_error`` on every step, as Celery applies a chain).

    Raises:
        InvalidArgument: as :func:`link_signature`, ``replacement`` first in its field (a
            group is one: Celery makes it a chord whose body is its builtin
            ``celery.accumulate``, which the kernel does not run).
    """
    if sig.get("subtask_type") != "chain":
        return link_signature(sig, "replacement")
    options = dict(sig.get("options") or {})
    refuse_options(options, {"task_id", "link_error"}, "replacement")
    tasks = (sig.get("kwargs") or {}).get("tasks") or ()
    steps = [link_signature(task, f"replacement.tasks[{i}]") for i, task in enumerate(tasks)]
    errbacks = [
        link_signature(s, f"replacement.link_error[{i}]")
        for i, s in enumerate(many(options.get("link_error")))
    ]
    for step, after in zip(steps, steps[1:], strict=False):
        step["callbacks"].insert(0, after)
    for step in steps:
        step["errbacks"].extend(errbacks)
    return steps[0]
