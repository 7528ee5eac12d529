"""A run's lineage in its request (issue 40): the task id of the run whose link made it
(``parent_id``), and the task ids of the chain's steps after it (``chain``: its callback
that ``continues`` it and that one's ``rest``, Celery's ``request.chain``, not its
``link``s), so a worker names them as Celery's does; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernel.types import Occurrence
    from tests.kernel.conftest import Harness


def _step(
    task_id: str,
    *callbacks: dict[str, Any],
    rest: tuple[dict[str, Any], ...] = (),
    continues: bool = True,
) -> dict[str, Any]:
    return {
        "task": "proj.step", "options": {"task_id": task_id}, "callbacks": list(callbacks),
        **({"continues": True} if continues else {}), **({"rest": list(rest)} if rest else {}),
    }  # fmt: skip


def _by_key(k: Harness, task_id: str) -> Occurrence:
    [occ] = [o for o in k.kernel.list_occurrences(limit=500) if o.trigger_key == f"key:{task_id}"]
    return occ


def _succeed(k: Harness, occurrence_id: int) -> None:
    claim = k.kernel.claim(occurrence_id, owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(occurrence_id, owner="w1", fence=claim.fence, result=1)


def test_a_chain_s_steps_name_their_parent_and_the_steps_after_them(k: Harness) -> None:
    # a | b | c, a's link d (not the chain's), c's callbacks a group (e, f): where it ends.
    group = [_step("e", continues=False), _step("f", continues=False)]
    made = k.kernel.enqueue(
        task="proj.step", key="a", request={"root_id": "a"},
        callbacks=[_step("b", rest=(_step("c", *group, continues=False),)),
                   _step("d", continues=False)],
    )  # fmt: skip
    first = k.kernel.get_occurrence(made.occurrence_id)
    assert first.payload["request"] == {"root_id": "a", "chain": ["b", "c"]}
    _succeed(k, made.occurrence_id)
    b, d = _by_key(k, "b"), _by_key(k, "d")
    assert b.payload["request"] == {"parent_id": "a", "chain": ["c"]}
    assert d.payload["request"] == {"parent_id": "a"}
    _succeed(k, b.id)
    assert _by_key(k, "c").payload["request"] == {"parent_id": "b"}
    _succeed(k, _by_key(k, "c").id)
    assert _by_key(k, "e").payload["request"] == {"parent_id": "c"}
