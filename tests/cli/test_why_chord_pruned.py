"""``kernel why`` once retention deleted a chord's members and its row (issue 42 item 4):
the body left behind is told without the chord, and a pruned member is not found."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kernel import EnqueueRequest, Kernel


def test_why_tells_a_body_whose_chord_was_pruned(kernel: Kernel, cli: Any) -> None:
    made = kernel.enqueue_many(
        [EnqueueRequest("shop.add", args=[m], key=f"m-{m}") for m in range(2)],
        chord={"id": "chord-1", "body": {"task": "shop.tsum", "options": {"task_id": "body-1"}}},
    )
    for index, member in enumerate(made):
        claim = kernel.claim(member.occurrence_id, owner="w", lease=30)
        assert claim is not None
        kernel.succeed(member.occurrence_id, owner="w", fence=claim.fence, result=index)
    [body] = [o for o in kernel.list_occurrences(limit=10) if o.trigger_key == "key:body-1"]
    assert cli("why", str(body.id), "--json").json()["canvas"]["role"] == "chord body"
    time.sleep(0.05)  # the members' settles older than the prune's horizon
    assert kernel.prune(older_than=timedelta(milliseconds=10))["occurrences"] == 2
    said = cli("why", str(body.id), "--json")
    assert said.code == 0, said.out
    assert (said.json()["canvas"] or {}).get("chord") is None
    assert "chord-1" not in cli("why", str(body.id)).out
    gone = cli("why", str(made[0].occurrence_id), "--json")
    assert gone.code != 0 and gone.json()["error"]["code"] == "NOT_FOUND", gone.out


def test_why_tells_a_member_that_handed_its_place_on(kernel: Kernel, cli: Any) -> None:
    """A member that is a chain: its first step's success hands its place in the chord to
    the next step. Its story names the chord without a place of its own."""
    step = {"task": "shop.add", "options": {"task_id": "m1-next"}, "continues": True}
    made = kernel.enqueue_many(
        [
            EnqueueRequest("shop.add", args=[0], key="m-0"),
            EnqueueRequest("shop.add", args=[1], key="m-1", callbacks=[step]),
        ],
        chord={"id": "chord-1", "body": {"task": "shop.tsum", "options": {"task_id": "body-1"}}},
    )
    first = made[1].occurrence_id
    claim = kernel.claim(first, owner="w", lease=30)
    assert claim is not None
    kernel.succeed(first, owner="w", fence=claim.fence, result=1)
    said = cli("why", str(first))
    assert said.code == 0, said.out
    assert "member of chord chord-1 (2 members), its place handed on, open" in said.out
