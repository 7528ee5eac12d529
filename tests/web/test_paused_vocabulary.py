"""A paused occurrence is ``paused`` in the HTTP API too: a status filter, counted once."""

from __future__ import annotations

from web.support import Web


def test_the_api_filters_and_counts_paused_occurrences(web: Web) -> None:
    job = web.fresh_job()
    occ = web.kernel.run_now(job, request_id=f"{job}-r", operator="t").occurrence.id
    claim = web.kernel.claim(occ, owner="w1", lease=30)
    assert claim is not None
    web.kernel.request_pause(occ, expected_fence=claim.fence, request_id=f"{job}-p",
                             safe_points=["adapter_checkpoint"], operator="t")  # fmt: skip
    web.kernel.ack_pause(occ, owner="w1", fence=claim.fence, request_id=f"{job}-p",
                         expected_revision=None, safe_point="adapter_checkpoint",
                         checkpoint={"done": 1})  # fmt: skip
    with web.api(web.tokens["viewer"]) as api:
        listed = api.get("/api/occurrences", params={"status": "paused", "job": job})
        assert listed.status_code == 200, listed.text
        assert [o["id"] for o in listed.json()] == [occ]
        status = api.get("/api/status").json()
    waiting = web.kernel.list_occurrences(statuses=["retry_wait"], limit=1000)
    unpaused = [o for o in waiting if not (o.control and o.control.state.value == "paused")]
    assert status["counts"]["paused"] == status["paused"] >= 1
    assert status["counts"]["retry_wait"] == len(unpaused)
