"""Enqueue: a task's ad hoc runs as occurrences of its implicit job, idempotent by key.

Every task has an implicit job, ``task:<task name>`` (kind ``task``, no schedule,
overlap ``allow``), defined from the task's own settings the first time this process
enqueues it (and revised when they change, keeping an operator's enable/disable). An
enqueued run is an ordinary occurrence of that job — claim, fence, lease, retries,
dead letter, pause, cancel, ``why`` and events work unchanged — whose snapshot carries
the call's ``args``/``kwargs`` and its queue, delivery and priority.

The rows of one call (or one ``enqueue_many``) are inserted by one statement
(:func:`kernel.statements.enqueue_occurrences`): only for jobs that exist, and
only where the idempotency key is new. A caller's ``key`` gives the trigger key
``key:<key>``, so the same key is the same occurrence for as long as it is retained,
however many callers race for it; without a key each call is a new
``enqueue:<random>`` firing. A task whose settings give ``max_queued`` has its calls
bounded by it, its job row held while they are counted (:func:`_hold_bounded`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs
from kernel.errors import InvalidArgument, NotFound, StateConflict
from kernel.jobs import batch_rows
from kernel.jobs import definitions as job_ops
from kernel.occurrences.chains import make_chord, make_chord_step
from kernel.occurrences.firing import QUEUE_FULL, backlog_full, lock_job
from kernel.occurrences.rows import existing_keys, insert_chunks, insert_enqueued
from kernel.records import dumps, loads, to_dt
from kernel.spec.enqueue_request import (
    MAX_KEY,
    TASK_JOB_PREFIX,
    EnqueueRequest,
    EnqueueRow,
    checked_links,
    task_job_id,
    task_job_spec,
)
from kernel.spec.link_runs import ChordStep, chord_step
from kernel.statements import CHORD_ROW
from kernel.transaction.tx import Tx
from kernel.transitions.chords import grow

__all__ = [
    "MAX_KEY",
    "TASK_JOB_PREFIX",
    "EnqueueRequest",
    "Enqueued",
    "enqueue",
    "ensure_jobs",
    "task_job_id",
    "task_job_spec",
]


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue made or found.

    Attributes:
        occurrence_id: the occurrence.
        deduplicated: its key existed: this is the occurrence an earlier call made.
        job_id: ``task:<task name>``.
        queue: the queue its hint goes to.
        claimable: whether it may be claimed now (no countdown/eta in the future).
        timeout: its timeout in seconds (the hint's time limit), or None.
        priority: its priority (0-255), which its hint carries.
        not_before: when a run made now and held back by countdown/eta may start (its
            hint's Celery ``eta``), else None.
        trigger_key: its trigger key (the caller's ``key:<key>``, else ``enqueue:<ms><random>``).
    """

    occurrence_id: int
    deduplicated: bool
    job_id: str
    queue: str
    claimable: bool
    timeout: float | None = None
    priority: int = 0
    not_before: datetime | None = None
    trigger_key: str = ""


def _ensure_job(tx: Tx, spec: Mapping[str, Any]) -> None:
    """Define the implicit job, or revise it to ``spec``, keeping its enabled state."""
    current = tx.conn.execute(
        sa.select(jobs.c.revision, jobs.c.enabled, jobs.c.spec).where(jobs.c.id == spec["id"])
    ).first()
    if current is None:
        try:
            job_ops.define_job(tx, spec)
        except StateConflict:  # defined meanwhile with other settings: revise below
            _ensure_job(tx, spec)
        return
    if loads(current.spec)["kind"] != "task":
        raise InvalidArgument(
            "task", f"job {spec['id']!r} exists and is not a task's implicit job; rename one"
        )
    job_ops.revise_job(tx, {**spec, "enabled": current.enabled}, current.revision)


def ensure_jobs(
    tx: Tx, tasks: Mapping[str, Mapping[str, Any]], defined: dict[str, dict[str, Any]]
) -> None:
    """The implicit job of each of ``tasks`` (name -> settings) as its settings define it,
    unless this process ensured that spec already (``defined``: :func:`enqueue`'s)."""
    for task, settings in tasks.items():
        spec = task_job_spec(task, settings)
        if defined.get(spec["id"]) != spec:
            _ensure_job(tx, spec)
            defined[spec["id"]] = spec


def enqueue(
    tx: Tx,
    requests: Sequence[EnqueueRequest],
    *,
    defined: dict[str, dict[str, Any]],
    hinted: bool = False,
    chord: Mapping[str, Any] | None = None,
    nested: Sequence[tuple[int, Mapping[str, Any]]] = (),
) -> list[Enqueued]:
    """Make (or find, by key) one occurrence per request, in this transaction.

    ``defined``: job id -> the spec this process last ensured, so a task's job is
    defined once per process (and again when its settings change or it was deleted).
    ``hinted``: the caller publishes the claimable ones' hints itself, at once.
    ``chord``: ``{"id": ..., "body": signature, "result_id": ...}``: the requests are a
    chord's members, in group order; the settle of the last to succeed makes the body,
    their results its first argument (kernel/occurrences/chains.py); ``result_id`` (else
    the body's task id): the id its failure is written and its errbacks given under;
    none (an empty header): the body is made now, with []. ``"open": True``: the chord
    stays open for more members until closed (kernel/jobs/chord_growth.py). ``{"id":
    ..., "grow": "caller" | "member"}``: the requests are more members of that chord,
    its caller's while it is open, or a running member's (checked by the caller).
    ``nested``: (index, signature carrying a ``chord``: kernel/spec/enqueue_request.py)
    pairs, chords made beside the requests with their members; in ``chord``, each is its
    member at that index of group order (the requests fill the others), whose body's end
    takes that place, as Celery counts a chord by its body.

    Raises:
        InvalidArgument: a request is invalid (``field`` names it, ``requests[i].`` first
            in a batch), or a chord's body or id is, or a new chord's member exists
            already; nothing is written.
        StateConflict: a task's calls would pass its settings' ``max_queued``
            (:func:`_refuse_overrun`); nothing is written.
    """
    specs: dict[str, dict[str, Any]] = {}
    rows: list[EnqueueRow] = []
    encoded: dict[int, str] = {}
    streamed = batch_rows.streamed(tx, requests, chord, nested)
    if streamed:  # the rows made while the server inserts those before them
        batch_rows.task_specs(requests, specs, encoded)
    else:  # every row checked before anything is written
        for _ in batch_rows.prepared(requests, specs, hinted, encoded, rows, streamed=False):
            pass
    body = None if chord is None or "grow" in chord else _chord_of(chord, rows)
    steps, step_tasks = _nested(nested, len(rows))
    if chord is not None and body is None:
        _name_chord(rows, str(chord["id"]))
    for row in rows:  # a link's job exists before its parent can settle
        for task, settings in row.links.items():
            specs.setdefault(task_job_id(task), task_job_spec(task, settings))
    for task, settings in [*(body[1].items() if body else ()), *step_tasks.items()]:
        specs.setdefault(task_job_id(task), task_job_spec(task, settings))
    for job_id, spec in specs.items():
        if defined.get(job_id) is not spec:  # the cached spec: the same settings
            _ensure_job(tx, spec)
    bounded = _hold_bounded(tx, requests, specs)
    # One run, no definition written before it: on PostgreSQL its statement is the whole
    # transaction (one round trip); what follows it, rarely, is a transaction of its own.
    alone = len(rows) == 1 and chord is None and not bounded and not steps
    if streamed:
        chunks = batch_rows.prepared(requests, specs, hinted, encoded, rows, streamed=True)
        made, found = insert_chunks(tx, chunks)
    else:
        made, found = insert_enqueued(tx, rows, alone=alone)
    found.update(existing_keys(tx, [r for r in rows if r.key not in made and r.key not in found]))
    orphans = [row for row in rows if row.key not in made and row.key not in found]
    if orphans:  # their job was deleted since this process defined it: define it again
        for job_id in {row.job_id for row in orphans}:
            _ensure_job(tx, specs[job_id])
        made.update(insert_enqueued(tx, orphans)[0])
    _refuse_overrun(tx, rows, made, bounded)
    for job_id, spec in specs.items():
        defined[job_id] = spec
    answers: list[Enqueued] = []
    seen: set[str] = set()
    for row in rows:
        created = row.key in made and row.key not in seen  # a key twice: the first made it
        seen.add(row.key)
        if not created:
            occurrence_id = made[row.key].occurrence_id if row.key in made else found[row.key]
            answers.append(
                Enqueued(occurrence_id, True, row.job_id, row.values["queue"], False,
                         row.timeout, row.values["priority"], None, row.values["trigger_key"])
            )  # fmt: skip
            continue
        new = made[row.key]
        held_back = new.available_at > tx.now
        answers.append(
            Enqueued(
                new.occurrence_id,
                False,
                row.job_id,
                row.values["queue"],
                not held_back,
                row.timeout,
                row.values["priority"],
                to_dt(new.available_at) if held_back else None,
                row.values["trigger_key"],
            )
        )
    _chord_members(tx, chord, body, answers, steps)
    return answers


def _nested(
    nested: Sequence[tuple[int, Mapping[str, Any]]], runs: int
) -> tuple[list[tuple[int, ChordStep]], dict[str, Mapping[str, Any]]]:
    """The chords ``nested`` (:func:`enqueue`) checked, at their indexes among ``runs``
    more members, and the tasks they name (with their settings)."""
    if not nested:
        return [], {}
    at = [index for index, _ in nested]
    if sorted(at) != sorted(set(at)) or not all(0 <= i < runs + len(at) for i in at):
        raise InvalidArgument("nested", "each index is a distinct place in the group order")
    try:
        text, tasks = checked_links([sig for _, sig in nested], [])
    except InvalidArgument as exc:
        why = exc.message.removeprefix(f"{exc.field}: ")
        raise InvalidArgument(re.sub(r"^callbacks", "nested", exc.field), why) from None
    sigs = loads(str(text))["callbacks"]
    if any("chord" not in sig for sig in sigs):
        raise InvalidArgument("nested", "each is a signature carrying a chord")
    return [(i, chord_step(sig, (), None)) for i, sig in zip(at, sigs, strict=True)], tasks


def _chord_members(
    tx: Tx,
    chord: Mapping[str, Any] | None,
    body: tuple[str, Any] | None,
    answers: Sequence[Enqueued],
    steps: Sequence[tuple[int, ChordStep]],
) -> None:
    """The chord's members counted in (a new chord's row made, or an open one grown),
    then each nested chord made, holding its place in it by ``chord:<id>``."""
    runs = iter([(a.occurrence_id, a.deduplicated) for a in answers])
    at = dict(steps)
    members: list[tuple[int | str, bool]] = [
        (f"chord:{at[i].chord_id}", _made_before(tx, at[i].chord_id)) if i in at else next(runs)
        for i in range(len(answers) + len(steps))
    ]
    if chord is not None and body is None:
        # A replayed addition (its key made before) is counted in already.
        added = [member for member, deduplicated in members if not deduplicated]
        grow(tx, str(chord["id"]), added, by_member=chord["grow"] == "member")
    elif chord is not None and body is not None:
        refused = make_chord(tx, str(chord["id"]), body[0], members, closed=not chord.get("open"))
        if refused is not None:
            raise InvalidArgument(*refused)
    for _, step in steps:
        place = None if chord is None else {"chord": chord["id"], "of": f"chord:{step.chord_id}"}
        if not make_chord_step(tx, None, step, place):
            raise InvalidArgument("nested", f"chord {step.chord_id!r} cannot be made")


def _made_before(tx: Tx, chord_id: str) -> bool:
    return tx.conn.execute(CHORD_ROW, {"chord_id": chord_id}).first() is not None


def _hold_bounded(
    tx: Tx, requests: Sequence[EnqueueRequest], specs: Mapping[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The implicit jobs whose calls their task's settings bound (``max_queued`` given: a
    job's default bound is its firings'), each job row held, in id order, until the
    transaction ends: callers at once are admitted one after another, each counting the
    calls of those before it (as a job's firings are, kernel/occurrences/firing.py)."""
    bounded = {task_job_id(r.task): specs[task_job_id(r.task)]
               for r in requests if "max_queued" in r.settings}  # fmt: skip
    for job_id in sorted(bounded):
        try:
            lock_job(tx, job_id)
        except NotFound:  # deleted since this process defined it
            _ensure_job(tx, bounded[job_id])
            lock_job(tx, job_id)
    return bounded


def _refuse_overrun(
    tx: Tx, rows: Sequence[EnqueueRow], made: Mapping[str, Any], bounded: Mapping[str, Any]
) -> None:
    """Refuse the whole call (its transaction rolls back) when the runs it made overrun
    their task's ``max_queued``; a call that made none (its keys existed) is no new call."""
    for job_id, spec in bounded.items():
        new = any(row.job_id == job_id and row.key in made for row in rows)
        if new and backlog_full(tx, job_id, spec, inserted=True):
            bound = spec["max_queued"]
            behind = " behind the one that runs next" if spec["overlap"] == "queue" else ""
            raise StateConflict(
                f"task {spec['payload']['task']!r} has max_queued {bound} calls waiting"
                f"{behind} (its settings.max_queued): this call is refused, nothing written; "
                "call again once some have run, or raise max_queued",
                job_id=job_id, reason=QUEUE_FULL, field="settings.max_queued", max_queued=bound,
            )  # fmt: skip


def _chord_of(
    chord: Mapping[str, Any], rows: Sequence[EnqueueRow]
) -> tuple[str, dict[str, Mapping[str, Any]]]:
    """A chord's body checked (its links JSON, and the tasks it names, with their
    settings), and each member's links made to name the chord."""
    chord_id = chord.get("id")
    if not isinstance(chord_id, str) or not 0 < len(chord_id) <= MAX_KEY - 10:
        raise InvalidArgument("chord.id", f"must be 1 to {MAX_KEY - 10} characters")
    raw = chord.get("body")
    # A group as the body (Celery's chord(header, group(...))): each member made alike.
    bodies: list[Any] = list(raw) if isinstance(raw, list) else [raw]
    if not bodies or not all(isinstance(body, Mapping) for body in bodies):
        raise InvalidArgument(
            "chord.body", "must be a signature (a JSON object), or a group's: a list of them"
        )
    signed = []
    for index, body in enumerate(bodies):
        # Keyed by its own task id, else by the chord: made once whichever member makes it.
        given = body.get("options") or {}
        if not isinstance(given, Mapping):
            raise InvalidArgument("chord.body.options", "must be a JSON object")
        own = f"chord:{chord_id}" + (f":{index}" if isinstance(raw, list) else "")
        options = {"task_id": own, **{k: v for k, v in given.items() if v is not None}}
        signed.append({**body, "options": options})
    try:
        text, tasks = checked_links(signed, [])
    except InvalidArgument as exc:
        why = exc.message.removeprefix(f"{exc.field}: ")
        field = re.sub(r"^callbacks\[(\d+)\]", r"chord.body[\1]", exc.field)
        if not isinstance(raw, list):
            field = field.replace("chord.body[0]", "chord.body", 1)
        raise InvalidArgument(field, why) from None
    _name_chord(rows, chord_id)
    result_id = chord.get("result_id")
    # A group body, even of one member, fails member by member (chains.fail_chord).
    group = {"group": True} if isinstance(raw, list) else {}
    if result_id is None:
        return (dumps({**loads(str(text)), **group}) if group else str(text)), tasks
    if not isinstance(result_id, str) or not 0 < len(result_id) <= MAX_KEY:
        raise InvalidArgument("chord.result_id", f"must be a task id of 1 to {MAX_KEY} characters")
    # Stored with the body: the chord's failure is written under it (a chain body's last step).
    return dumps({**loads(str(text)), **group, "result_id": result_id}), tasks


def _name_chord(rows: Sequence[EnqueueRow], chord_id: str) -> None:
    """Each member's links name its chord: its settle counts the chord down."""
    for row in rows:
        links = loads(row.values["links"] or '{"callbacks": [], "errbacks": []}')
        row.values["links"] = dumps({**links, "chord": chord_id})
