"""Chained jobs and links: a child job's occurrence, or a run's callbacks and errbacks
(kernel/spec/enqueue_request.py), made in the transaction that settles the parent; a
chord's members and row, made by an enqueue or by a callback that is a chord (a chord as
a chain's step); and a chord's body, made by the settle of its last member
(kernel/transitions/chords.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import chords, occurrences
from kernel.events import EventType
from kernel.occurrences.firing import admit, create_gated, lock_job
from kernel.occurrences.rows import Made, existing_keys, insert_enqueued
from kernel.records import dumps, loads
from kernel.spec.enqueue_request import (
    ChordStep,
    EnqueueRequest,
    EnqueueRow,
    chord_steps,
    link_requests,
    prepare,
)
from kernel.spec.task_runs import caller_key
from kernel.transaction.tx import Tx
from kernel.transitions import chords as TC
from kernel.transitions import door

__all__ = [
    "DEFAULT_FANOUT",
    "MAX_CHAIN_DEPTH",
    "cancelled_links",
    "fanout_limit",
    "fire_children",
    "fire_links",
    "make_chord",
    "condition_matches",
    "outcome_text",
]

MAX_CHAIN_DEPTH = 10
#: A parent's fan-out bound when none of its children declares ``after.fanout``.
DEFAULT_FANOUT = 25


def fanout_limit(specs: list[dict[str, Any]]) -> int:
    """How many children of one parent may fire: the smallest ``after.fanout`` they declare."""
    return min((s["after"].get("fanout", DEFAULT_FANOUT) for s in specs), default=DEFAULT_FANOUT)


def outcome_text(result: Any, error: dict[str, Any] | None) -> str:
    """What a condition is matched against: the result as text, or the error
    (``CODE: message``) of a failure."""
    if error is not None:
        return f"{error.get('code', '')}: {error.get('message', '')}"
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True, default=str)


def condition_matches(condition: str | None, text: str) -> bool:
    """``contains:<text>`` or ``regex:<pattern>`` against the parent's outcome text."""
    if condition is None:
        return True
    kind, _, operand = condition.partition(":")
    if kind == "contains":
        return operand in text
    return re.search(operand, text) is not None


def fire_children(
    tx: Tx,
    *,
    parent_id: int,
    parent_job: str,
    succeeded: bool,
    result: Any,
    error: dict[str, Any] | None,
    parent_depth: int,
) -> None:
    """Create an occurrence for each job chained after ``parent_job`` that this outcome
    triggers, at most the parents' fan-out bound, each admitted like any occurrence."""
    children = tx.conn.execute(st.CHILD_JOBS, {"job_id": parent_job}).all()
    if not children:
        return
    depth = parent_depth + 1
    specs = {child.id: json.loads(child.spec) for child in children}
    limit = fanout_limit(list(specs.values()))
    text = outcome_text(result, None if succeeded else error)
    fired = 0
    for child in sorted(children, key=lambda c: c.id):
        spec = specs[child.id]
        after = spec["after"]
        wanted = after["on"]
        if wanted != "complete" and (wanted == "success") != succeeded:
            continue
        # The column, not the spec: enable/disable flips only the column.
        if not child.enabled:
            continue
        if not condition_matches(after.get("condition"), text):
            continue
        if depth > MAX_CHAIN_DEPTH:
            tx.emit(
                EventType.CHAIN_DEPTH_EXCEEDED, job_id=child.id, parent_id=parent_id, depth=depth
            )
            continue
        if fired >= limit:
            tx.emit(
                EventType.CHAIN_FANOUT_EXCEEDED, job_id=child.id, parent_id=parent_id, limit=limit
            )
            continue
        # Read from the locked row: a job cancel that held it meanwhile disabled it
        # (READ COMMITTED: CHILD_JOBS saw the job before that commit).
        if not lock_job(tx, child.id).enabled:
            continue
        fired += 1
        refused = admit(tx, child.id, spec)
        delay_ms = int(float(after.get("delay") or 0) * 1000)
        create_gated(
            tx,
            job_id=child.id,
            revision=child.revision,
            spec=spec,
            trigger_key=f"chain:{parent_id}",
            scheduled_for=tx.now + delay_ms,
            available_at=tx.now + delay_ms,
            refused=refused,
            parent_id=parent_id,
            chain_depth=depth,
        )


def fire_links(
    tx: Tx,
    *,
    parent_id: int,
    links: str | None,
    trigger_key: str,
    succeeded: bool,
    result: Any = None,
    cancelled: bool = False,
) -> None:
    """Make the settled run's callbacks (``succeeded``) or errbacks (dead letter) occurrences,
    each once: its key is its own task id (or its parent and place), so a second settle
    of the same run (a requeued dead letter dying again) finds them made. A chord's member
    counts its chord down, or fails it (:func:`_settle_chord_member`); a ``cancelled`` run
    only fails its chord (Celery calls no errback of a revoked task).

    An errback's first argument is the failed run's task id: its enqueue key (Celery's
    task id) when it has one, else its occurrence id. A link whose task's job was deleted
    since the parent was enqueued is not made (``link_not_made``)."""
    if links is None:
        return
    if not cancelled:
        task_id = caller_key(trigger_key)
        requests = link_requests(
            links,
            succeeded=succeeded,
            result=result,
            parent_id=parent_id,
            parent_task_id=task_id or str(parent_id),
        )
        _make_links(tx, parent_id, requests)
        for step in chord_steps(links, result=result, parent_id=parent_id) if succeeded else ():
            _make_chord_step(tx, parent_id, step)
    chord_id = loads(links).get("chord")
    if chord_id is not None:
        member = caller_key(trigger_key)
        _settle_chord_member(
            tx, chord_id, parent_id, member or str(parent_id), succeeded and not cancelled,
            cancelled,
        )  # fmt: skip


def cancelled_links(tx: Tx, occurrence_id: int) -> None:
    """What a cancelled run's links make: its chord fails (read here: a cancel's statement
    does not return the links, and a cancel of a chord's member is rare)."""
    row = tx.conn.execute(
        sa.select(occurrences.c.links, occurrences.c.trigger_key).where(
            occurrences.c.id == occurrence_id
        )
    ).one()
    fire_links(
        tx,
        parent_id=occurrence_id,
        links=row.links,
        trigger_key=row.trigger_key,
        succeeded=False,
        cancelled=True,
    )


def _settle_chord_member(
    tx: Tx, chord_id: str, member_id: int, member_task_id: str, succeeded: bool, cancelled: bool
) -> None:
    """A chord's member settled for good. Its success counts the chord down in one guarded
    statement (the chord's row held until this settle commits: the next member's settle
    waits, then counts after it); the one that reads 0 makes the body, the members'
    results in group order first. Its failure fails the chord once: the body's errbacks
    are made, the body's task id first, and the body never is."""
    params = {"chord_id": chord_id, "now": tx.now}
    if succeeded:
        row = door.run(tx, TC.MEMBER_SUCCEEDS_IN_CHORD, params)
        if row is None or row.remaining > 0:
            return
        members = loads(row.members)
        stored = dict(
            tx.conn.execute(
                sa.select(occurrences.c.id, occurrences.c.result).where(
                    occurrences.c.id.in_(members)
                )
            ).all()
        )
        results = [loads(stored.get(member)) for member in members]
        requests = link_requests(
            row.body, succeeded=True, result=results, parent_id=member_id, parent_task_id=""
        )
        _make_links(tx, member_id, requests)
        # A body that is a chord's (Celery's group | group | task): that chord's members.
        steps = chord_steps(row.body, result=results, parent_id=member_id)
        for step in steps:
            _make_chord_step(tx, member_id, step)
        tx.emit(
            EventType.CHORD_COMPLETED,
            occurrence_id=member_id,
            chord_id=chord_id,
            body=requests[0].key if requests else f"chord:{steps[0].chord_id}",
        )
        return
    failed = door.run(tx, TC.MEMBER_FAILS_CHORD, params)
    if failed is None:
        return
    stored = loads(failed.body)
    body = stored["callbacks"][0]
    body_task_id = stored.get("result_id") or body["options"]["task_id"]
    errbacks = dumps({"callbacks": [], "errbacks": body["errbacks"]})
    _make_links(
        tx,
        member_id,
        link_requests(
            errbacks,
            succeeded=False,
            result=None,
            parent_id=member_id,
            parent_task_id=body_task_id,
            # Keyed by the chord: the member's own errbacks are keyed by it.
            stem=f"chord-errbacks:{chord_id}",
        ),
    )
    tx.emit(
        EventType.CHORD_FAILED,
        occurrence_id=member_id,
        chord_id=chord_id,
        body_task=body["task"],
        body_task_id=body_task_id,
        member_task_id=member_task_id,
        reason="cancelled" if cancelled else "dead_letter",
    )


def make_chord(
    tx: Tx, chord_id: str, body: str, members: Sequence[tuple[int, bool]]
) -> tuple[str, str] | None:
    """The chord's row over ``members`` ((occurrence id, whether it existed before) in
    group order). A replayed chord (its id exists with these members) is the one made
    before. A new chord over existing runs, or an existing id over other runs, is not
    made: their links would count down a chord they are not members of, or one that
    never completes; answers (field, message) then."""
    ids = dumps([occurrence_id for occurrence_id, _ in members])
    params = {
        "chord_id": chord_id, "members": ids, "body": body,
        "remaining": len(members), "now": tx.now,
    }  # fmt: skip
    if door.run(tx, TC.ENQUEUE_MAKES_CHORD, params) is None:
        made = tx.conn.execute(
            sa.select(chords.c.members).where(chords.c.id == chord_id)
        ).scalar_one()
        if made != ids:
            return "chord.id", f"{chord_id!r} is an existing chord's id, with other members"
        return None
    existed = [index for index, (_, old) in enumerate(members) if old]
    if existed:
        return (
            f"requests[{existed[0]}].key",
            f"is the key of an existing run: a new chord ({chord_id!r}) needs new members",
        )
    return None


def _make_chord_step(tx: Tx, parent_id: int, step: ChordStep) -> None:
    """A callback that is a chord: its members (each naming the chord in its links) and
    its row, in the settle's transaction; a chord that cannot be made so is not, and
    says why (``link_not_made``)."""
    rows = [prepare(request, {}, False, parent_id) for request in step.members]
    for row in rows:
        links = loads(row.values["links"]) or {"callbacks": [], "errbacks": []}
        row.values["links"] = dumps({**links, "chord": step.chord_id})
    made, existing = _insert_links(tx, parent_id, rows)
    if not all(row.key in made or row.key in existing for row in rows):
        return  # a member's job was deleted: _insert_links said so; no chord to count down
    members = [
        (made[row.key].occurrence_id, False) if row.key in made else (existing[row.key], True)
        for row in rows
    ]
    refused = make_chord(tx, step.chord_id, step.body, members)
    if refused is not None:
        tx.emit(
            EventType.LINK_NOT_MADE,
            job_id=rows[0].job_id,
            occurrence_id=parent_id,
            reason="chord_refused",
            chord_id=step.chord_id,
            message=refused[1],
        )


def _make_links(tx: Tx, parent_id: int, requests: Sequence[EnqueueRequest]) -> None:
    """The occurrences of ``requests`` (a settled run's links) whose keys are new."""
    if requests:
        _insert_links(tx, parent_id, [prepare(r, {}, False, parent_id) for r in requests])


def _insert_links(
    tx: Tx, parent_id: int, rows: Sequence[EnqueueRow]
) -> tuple[dict[str, Made], dict[str, int]]:
    """Insert a settled run's link ``rows`` whose keys are new, and tell of those whose
    job was deleted since; answers the rows made, and the ids of the keys that existed."""
    made, existing = insert_enqueued(tx, rows)
    TC.hand_over(tx, rows, made)  # a replaced chord member's replacement, made now
    unseen = [row.key for row in rows if row.key not in made and row.key not in existing]
    existing.update(existing_keys(tx, unseen))
    for row in rows:
        if row.key not in made and row.key not in existing:
            tx.emit(
                EventType.LINK_NOT_MADE,
                job_id=row.job_id,
                occurrence_id=parent_id,
                reason="job_deleted",
                trigger_key=row.values["trigger_key"],
            )
    return made, existing
