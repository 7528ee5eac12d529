"""``kernel why OCCURRENCE`` tells a canvas's story (issue 40): a chain's step, its parent
and which step of how many; a chord's member, its chord and how many members remain; the
chord's body and what made it; what each settle still makes. ``--json`` has it as
``canvas``."""

from __future__ import annotations

from typing import Any

from kernel import EnqueueRequest, Kernel


def _sig(task: str, task_id: str, **more: Any) -> dict[str, Any]:
    return {"task": task, "args": [], "options": {"task_id": task_id}, **more}


def _succeed(kernel: Kernel, occurrence_id: int, result: Any) -> None:
    claim = kernel.claim(occurrence_id, owner="w", lease=30)
    assert claim is not None
    kernel.succeed(occurrence_id, owner="w", fence=claim.fence, result=result)


def _by_key(kernel: Kernel, task_id: str) -> int:
    [occ] = [o for o in kernel.list_occurrences(limit=100) if o.trigger_key == f"key:{task_id}"]
    return occ.id


def test_why_tells_a_chain_step_its_parent_and_place(kernel: Kernel, cli: Any) -> None:
    third = _sig("shop.c", "c-1")
    first = kernel.enqueue(
        task="shop.a",
        key="a-1",
        callbacks=[_sig("shop.b", "b-1", callbacks=[third])],
        errbacks=[_sig("shop.oops", "oops-1")],
    ).occurrence_id
    said = cli("why", str(first), "--json").json()["canvas"]
    assert (said["role"], said["step"], said["steps"], said["parent"]) == ("first step", 1, 3, None)
    assert [(n["task"], n["when"]) for n in said["next"]] == [
        ("shop.b", "succeeds"), ("shop.oops", "is dead-lettered"),
    ]  # fmt: skip
    _succeed(kernel, first, 1)
    second = _by_key(kernel, "b-1")
    said = cli("why", str(second), "--json").json()["canvas"]
    assert (said["role"], said["step"], said["steps"]) == ("step", 2, 3)
    assert said["parent"]["occurrence_id"] == first and said["parent"]["task_id"] == "a-1"
    text = cli("why", str(second)).out
    assert "step 2 of 3" in text and f"made by occurrence {first}" in text, text
    assert "shop.c is made when it succeeds" in text, text
    plain = kernel.enqueue(task="shop.a", key="alone").occurrence_id
    assert cli("why", str(plain), "--json").json()["canvas"] is None
    assert "canvas" not in cli("why", str(plain)).out


def test_why_tells_a_chord_member_what_remains_and_the_body_what_made_it(
    kernel: Kernel, cli: Any
) -> None:
    made = kernel.enqueue_many(
        [EnqueueRequest("shop.add", args=[m], key=f"m-{m}") for m in range(3)],
        chord={"id": "chord-1", "body": _sig("shop.tsum", "body-1")},
    )
    members = [m.occurrence_id for m in made]
    _succeed(kernel, members[0], 0)
    said = cli("why", str(members[1]), "--json").json()["canvas"]
    assert said["role"] == "chord member"
    chord = said["chord"]
    assert (chord["id"], chord["members"], chord["remaining"], chord["member_index"]) == (
        "chord-1", 3, 2, 1,
    )  # fmt: skip
    text = cli("why", str(members[1])).out
    assert "chord chord-1: 2 of 3 members still to succeed before its body shop.tsum" in text
    assert "member 2 of 3" in text, text
    _succeed(kernel, members[1], 1)
    _succeed(kernel, members[2], 2)
    body = _by_key(kernel, "body-1")
    said = cli("why", str(body), "--json").json()["canvas"]
    assert said["role"] == "chord body" and said["chord"]["state"] == "complete"
    assert said["parent"]["occurrence_id"] == members[2]
    out = cli("why", str(body)).out
    assert "body of chord chord-1" in out
