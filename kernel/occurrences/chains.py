"""Chained jobs and links: a child job's occurrence, or a run's callbacks and errbacks
(kernel/spec/enqueue_request.py), made in the transaction that settles the parent; a
chord's members and row, made by an enqueue or by a callback that is a chord (a chord as
a chain's step); and a chord's body, made by the settle of its last member
(kernel/transitions/chords.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import chords, occurrences
from kernel.events import EventType
from kernel.limits.chaining import MAX_CHAIN_DEPTH, condition_matches, fanout_limit, outcome_text
from kernel.occurrences.firing import admit, create_gated, lock_job
from kernel.occurrences.rows import insert_links
from kernel.records import dumps, loads
from kernel.spec.enqueue_request import EnqueueRequest, EnqueueRow, continuing, prepare
from kernel.spec.link_runs import ChordStep, chord_steps, link_requests
from kernel.spec.task_runs import caller_key, chain_ids, continued
from kernel.transaction.tx import Tx
from kernel.transitions import chords as TC
from kernel.transitions import door

__all__ = [
    "cancelled_links",
    "fail_chord",
    "make_chord_body",
    "make_chord_step",
    "fire_children",
    "fire_links",
    "make_chord",
]


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
    revoked: str | None = None,
) -> None:
    """Make the settled run's callbacks (``succeeded``) or errbacks (dead letter) occurrences,
    each once: its key is its own task id (or its parent and place), so a second settle
    of the same run (a requeued dead letter dying again) finds them made. A chord's member
    counts its chord down, or fails it (:func:`_settle_chord_member`), unless a callback
    continues it (a chain's next step, or a chord whose body does): that one takes its
    place in the chord; a ``revoked`` run (why: ``cancelled``, ``expired``) only fails its
    chord (Celery's worker calls no errback and applies no chain step of a revoked task).

    An errback's first argument is the failed run's task id: its enqueue key (Celery's
    task id) when it has one, else its occurrence id. A link whose task's job was deleted
    since the parent was enqueued is not made (``link_not_made``)."""
    if links is None:
        return
    chord_id = loads(links).get("chord")
    # A member's callback that continues it (a chain's next step) takes its place.
    place = {"chord": chord_id, "of": parent_id} if chord_id and succeeded else None
    held = False
    if revoked is None:
        task_id = caller_key(trigger_key) or str(parent_id)
        requests = link_requests(
            links,
            succeeded=succeeded,
            result=result,
            parent_id=parent_id,
            parent_task_id=task_id,
        )
        heirs = continuing(links) if place else []
        # A group the member's chain ends with: its results one list in the member's place.
        grouped = any(sig.get("shares") for sig in loads(links)["callbacks"])
        held = _make_links(tx, parent_id, requests, heirs, place, grouped, errbacks=not succeeded)
        steps = chord_steps(links, result=result, parent_task_id=task_id)
        for step in steps if succeeded else ():
            make_chord_step(tx, parent_id, step, place if step.continues else None)
            held = held or bool(place and step.continues)
    if chord_id is not None and not held:
        member = caller_key(trigger_key)
        failed = revoked or (None if succeeded else "dead_letter")
        _settle_chord_member(tx, chord_id, parent_id, member or str(parent_id), failed)


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
        revoked="cancelled",
    )


def _settle_chord_member(
    tx: Tx, chord_id: str, member_id: int | None, member_task_id: str, failed: str | None,
    told: Sequence[Any] = (),
) -> None:  # fmt: skip
    """A chord's member settled for good. Its success (``failed`` None) counts the chord
    down in one guarded statement (the chord's row held until this settle commits: the
    next member's settle waits, then counts after it); the one that reads 0 of a closed
    chord makes the body. Its failure (why: ``dead_letter``, ``cancelled``, ``expired``)
    fails the chord once (:func:`fail_chord`)."""
    params = {"chord_id": chord_id, "now": tx.now}
    if failed is None:
        row = door.run(tx, TC.MEMBER_SUCCEEDS_IN_CHORD, params)
        if row is not None and row.remaining == 0 and row.closed_at is not None:
            make_chord_body(
                tx, chord_id, row.members, row.body, member_id, parent_task_id=member_task_id
            )
        return
    row = door.run(tx, TC.MEMBER_FAILS_CHORD, params)
    if row is not None:
        fail_chord(tx, chord_id, row.body, member_id, member_task_id, failed, told)


def make_chord_body(
    tx: Tx,
    chord_id: str,
    members_json: str,
    body: str,
    parent_id: int | None,
    *,
    parent_task_id: str,
) -> None:
    """The body of a chord whose members all succeeded (in the transaction that saw it:
    the last member's settle, or its caller's close), the members' results in group
    order first, its parent ``parent_task_id`` (as Celery's last member applies the body)."""
    keyed = parent_id if parent_id is not None else f"chord:{chord_id}"  # no member: no parent
    members = loads(members_json)
    runs = TC.member_runs(members)
    stored = dict(
        tx.conn.execute(
            sa.select(occurrences.c.id, occurrences.c.result).where(occurrences.c.id.in_(runs))
        ).all()
    )
    results = TC.in_place(members, stored)
    requests = link_requests(
        body, succeeded=True, result=results, parent_id=keyed, parent_task_id=parent_task_id
    )
    # A chord a member's chain ends with: its body takes that member's place.
    place = loads(body).get("place")
    _make_links(tx, parent_id, requests, [place is not None] * len(requests), place)
    # A body that is a chord's (Celery's group | group | task): that chord's members.
    steps = chord_steps(body, result=results, parent_task_id=parent_task_id)
    for step in steps:
        make_chord_step(tx, parent_id, step, place)
    tx.emit(
        EventType.CHORD_COMPLETED,
        occurrence_id=parent_id,
        chord_id=chord_id,
        body=requests[0].key if requests else f"chord:{steps[0].chord_id}",
    )


def fail_chord(
    tx: Tx, chord_id: str, body: str, member_id: int | None, member_task_id: str, reason: str,
    told: Sequence[Any] = (),
) -> None:  # fmt: skip
    """A chord failed (its row's failure just written): the body's errbacks are made
    (but those a chord it holds the place of ``told``: Celery links a chord's errback to
    a chord in its header too, called once), the body's task id first (a group body's:
    each member's, under its own id), and the body never is; a chord that a member's
    chain ends with, or is, fails that member's chord too."""
    stored = loads(body)
    sig = stored["callbacks"][0]
    body_task_id = stored.get("result_id") or sig["options"]["task_id"]
    parent = member_id if member_id is not None else f"chord:{chord_id}"
    errbacks, bodies = TC.body_errbacks(stored, chord_id, parent, body_task_id, told)
    _make_links(tx, member_id, errbacks, errbacks=True)
    # A group as the body: each of its members' ids, whose results fail too.
    more: dict[str, Any] = {"body_task_ids": bodies} if stored.get("group") else {}
    # The steps of a chain after the body, failed with it (Celery's backend fails them).
    if after := chain_ids(continued(sig)):
        more["chain_task_ids"] = after
    tx.emit(
        EventType.CHORD_FAILED,
        occurrence_id=member_id,
        chord_id=chord_id,
        body_task=sig["task"],
        body_task_id=body_task_id,
        member_task_id=member_task_id,
        reason=reason,
        # The errbacks' task ids: Celery's backend lists them among the body's children.
        errback_task_ids=[request.key for request in errbacks],
        **more,
    )
    place = stored.get("place")
    if place is not None:  # the chord a member's chain ends with, or is: that member fails
        of = place["of"] if isinstance(place["of"], int) else member_id  # chord:<id>: no run
        told = [*told, *sig["errbacks"]] if isinstance(place["of"], str) else ()
        _settle_chord_member(tx, place["chord"], of, member_task_id, reason, told)


def make_chord(
    tx: Tx,
    chord_id: str,
    body: str,
    members: Sequence[tuple[int | str, bool]],
    *,
    closed: bool = True,
    parent_id: int | None = None,
) -> tuple[str, str] | None:
    """The chord's row over ``members`` ((occurrence id, or ``chord:<id>`` of a chord as
    a member, whether it existed before) in group order); not ``closed``: open, its
    caller to add members and close it (kernel/jobs/chord_growth.py). Closed with no
    member (an empty header), its body is made at once. A replayed chord (its id exists
    with these members) is the one made before. A new chord over existing runs, or an
    existing id over other runs, is not made: their links would count down a chord they
    are not members of, or one that never completes; answers (field, message) then.
    ``parent_id``: the run whose settle makes the chord (a chord as its callback or
    replacement)."""
    ids = dumps([occurrence_id for occurrence_id, _ in members])
    params = {
        "chord_id": chord_id, "members": ids, "body": body, "remaining": len(members),
        "now": tx.now, "closed_at": tx.now if closed else None,
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
    if closed and not members:
        make_chord_body(tx, chord_id, ids, body, parent_id, parent_task_id="")
    return None


def make_chord_step(
    tx: Tx, parent_id: int | None, step: ChordStep, place: Mapping[str, Any] | None
) -> bool:
    """A chord (a callback that is one, or an enqueue's): its members (each naming the
    chord in its links; a member that is a chord made so after the row, its place held by
    ``chord:<its id>`` until its body takes it) and its row, in this transaction; a chord
    that cannot be made so is not, and says why (``link_not_made``). ``place``: the outer
    chord's place its body takes. Whether it was made."""
    requests = [m for m in step.members if isinstance(m, EnqueueRequest)]
    rows = [prepare(request, {}, False, parent_id) for request in requests]
    for row in rows:
        _join(row, step.chord_id)
    made, existing = insert_links(tx, parent_id, rows)
    if not all(row.key in made or row.key in existing for row in rows):
        return False  # a member's job was deleted: _insert_links said so; no chord to count
    found = {r.key: made[r.key].occurrence_id if r.key in made else existing[r.key] for r in rows}
    runs = iter(rows)
    members: list[tuple[int | str, bool]] = []
    for member in step.members:
        if isinstance(member, ChordStep):
            members.append((f"chord:{member.chord_id}", False))
        else:
            row = next(runs)
            members.append((found[row.key], row.key not in made))
    body = step.body if place is None else dumps({**loads(step.body), "place": place})
    refused = make_chord(tx, step.chord_id, body, members, parent_id=parent_id)
    for inner in (m for m in step.members if isinstance(m, ChordStep)) if not refused else ():
        held = {"chord": step.chord_id, "of": f"chord:{inner.chord_id}"}
        if not make_chord_step(tx, parent_id, inner, held):  # its place is never taken
            _settle_chord_member(tx, step.chord_id, parent_id, "", "dead_letter")
    if refused is not None:
        tx.emit(
            EventType.LINK_NOT_MADE,
            job_id=rows[0].job_id if rows else None,
            occurrence_id=parent_id,
            reason="chord_refused",
            chord_id=step.chord_id,
            message=refused[1],
        )
    return refused is None


def _join(row: EnqueueRow, chord_id: str) -> None:
    """``row``'s run made a member of the chord ``chord_id`` (named in its links)."""
    links = loads(row.values["links"]) or {"callbacks": [], "errbacks": []}
    row.values["links"] = dumps({**links, "chord": chord_id})


def _make_links(
    tx: Tx,
    parent_id: int | None,
    requests: Sequence[EnqueueRequest],
    heirs: Sequence[bool] = (),
    place: Mapping[str, Any] | None = None,
    grouped: bool = False,
    *,
    errbacks: bool = False,
) -> bool:
    """The occurrences of ``requests`` (a settled run's links; ``errbacks``: a failure's,
    :func:`~kernel.occurrences.rows.insert_links`) whose keys are new; those ``heirs``
    marks take ``place`` (the chord, and its member whose place it is), in order, each
    counted in (``grouped``: :func:`~kernel.transitions.chords.pass_place`'s). Answers
    whether one did."""
    if not requests:
        return False
    rows = [prepare(r, {}, False, parent_id) for r in requests]
    chord_id, holder = (place["chord"], place["of"]) if place else ("", 0)
    heir_rows = [row for row, heir in zip(rows, heirs, strict=False) if heir and place]
    for row in heir_rows:
        _join(row, chord_id)
    made, _ = insert_links(tx, parent_id, rows, errbacks=errbacks)
    taking = [made[row.key].occurrence_id for row in heir_rows if row.key in made]
    if taking:
        TC.pass_place(tx, chord_id, holder, taking, grouped=grouped)
    return bool(heir_rows)
