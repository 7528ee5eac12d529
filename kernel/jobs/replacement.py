"""A run that replaces itself (Celery's ``self.replace(sig)``): its settle is the one
transaction that ends it as succeeded without a result and makes its replacement.

The replacement is one link signature (kernel/spec/enqueue_request.py): a task, a chain
(its next step among its callbacks) or a chord (a signature carrying ``chord``). The
step with the replaced run's task id (Celery froze it so: the task, a chain's last step,
a chord's body) takes that id over, as Celery's replacement inherits it: the caller's
result is its result. It gets the replaced run's callbacks (a chain's rest, ``link``)
and its place in a chord (its result counts in the replaced run's place); every step
up to it gets the replaced run's errbacks, as Celery links a chain's errback to each
task. Its trigger key (``replacing:<nesting>:<replaced>:<task id>``) counts the nesting.
A lost fence makes nothing: the settle refuses first.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kernel import statements as st
from kernel.errors import InvalidArgument
from kernel.events import EventType
from kernel.jobs.enqueueing import ensure_jobs
from kernel.occurrences.chains import fire_links
from kernel.occurrences.rows import existing_keys
from kernel.occurrences.runs import settle
from kernel.records import loads
from kernel.spec.enqueue_request import EnqueueRequest, checked_links, prepare
from kernel.spec.link_runs import chord_steps, link_requests
from kernel.spec.task_runs import replacement_of
from kernel.transaction.tx import Tx

__all__ = ["replace", "with_replaced_links"]


def replace(
    tx: Tx,
    occurrence_id: int,
    owner: str,
    fence: int,
    replacement: Mapping[str, Any],
    task_id: str,
    defined: dict[str, dict[str, Any]],
) -> list[int]:
    """Settle the held run as replaced and make ``replacement`` (module docstring).

    Returns:
        The occurrences made now: the first step's, or a chord's members.

    Raises:
        LeaseLost: (owner, fence) no longer holds the lease; nothing is written.
        InvalidArgument: no step has ``task_id``, or a signature is invalid (``field``
            starts ``replacement``); nothing is written.
    """
    settle(tx, occurrence_id, owner, fence, outcome="succeeded", replaced=True)
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).one()
    links = loads(row.links) or {"callbacks": [], "errbacks": []}
    earlier = replacement_of(row.trigger_key)
    marker = {
        "occurrence": occurrence_id,
        "nesting": (earlier[1] if earlier else 0) + 1,
        **({"chord": links["chord"]} if links.get("chord") else {}),
    }
    root = with_replaced_links(replacement, links, task_id, marker)
    try:
        text, tasks = checked_links([root], [])
    except InvalidArgument as exc:
        why = exc.message.removeprefix(f"{exc.field}: ")
        raise InvalidArgument(exc.field.replace("callbacks[0]", "replacement", 1), why) from None
    assert text is not None
    ensure_jobs(tx, tasks, defined)
    fire_links(tx, parent_id=occurrence_id, links=text, trigger_key=row.trigger_key, succeeded=True)
    made = _first_made(tx, text, occurrence_id)
    tx.emit(
        EventType.OCCURRENCE_REPLACED,
        job_id=row.job_id,
        occurrence_id=occurrence_id,
        replaced_by=made,
        task_id=task_id,
    )
    return made


def with_replaced_links(
    replacement: Mapping[str, Any],
    links: Mapping[str, Any],
    task_id: str,
    marker: Mapping[str, Any],
) -> dict[str, Any]:
    """``replacement`` with the replaced run's ``links`` moved onto it and the step
    taking over ``task_id`` marked (``replaces``: ``marker``). Its first runs get no
    result first: their arguments are their own. Pure."""
    root = copy.deepcopy(dict(replacement))
    path = _path_to(root, task_id)
    if path is None:
        raise InvalidArgument(
            "replacement",
            f"no step of it has the replaced run's task id {task_id!r}, which the caller's "
            "result follows: give the task that ends it that id (Celery's replace does)",
        )
    for step in path:
        step["errbacks"] = [*(step.get("errbacks") or ()), *links.get("errbacks", ())]
    path[-1]["callbacks"] = [*(path[-1].get("callbacks") or ()), *links.get("callbacks", ())]
    path[-1]["replaces"] = dict(marker)
    chord = root.get("chord")
    if isinstance(chord, dict) and isinstance(chord.get("header"), list):
        chord["header"] = [{**member, "immutable": True} for member in chord["header"]]
    else:
        root["immutable"] = True
    return root


def _path_to(sig: dict[str, Any], task_id: str) -> list[dict[str, Any]] | None:
    """The steps from ``sig`` along callbacks (and a chain's ``rest``) to the one whose
    task id is ``task_id``."""
    if not isinstance(sig, dict):
        return None
    if (sig.get("options") or {}).get("task_id") == task_id:
        return [sig]
    rest = sig.get("rest") or ()
    for index, step in enumerate(rest):
        path = _path_to(step, task_id)
        if path is not None:
            return [sig, *rest[:index], *path]
    for callback in sig.get("callbacks") or ():
        path = _path_to(callback, task_id)
        if path is not None:
            return [sig, *path]
    return None


def _first_made(tx: Tx, text: str, occurrence_id: int) -> list[int]:
    """The occurrences the replacement's links ``text`` made: its first step, or its
    chord's members."""
    steps = chord_steps(text, result=None, parent_task_id="")
    requests = (
        [m for m in steps[0].members if isinstance(m, EnqueueRequest)]
        if steps
        else link_requests(
            text, succeeded=True, result=None, parent_id=occurrence_id, parent_task_id=""
        )
    )
    rows = [prepare(request, {}, False, occurrence_id) for request in requests]
    found = existing_keys(tx, rows)
    return [found[row.key] for row in rows if row.key in found]
