"""The API's job resources carry each job's health, as ``kernel jobs list|show --json``."""

from __future__ import annotations

from web.support import Web


def test_job_resources_carry_health(web: Web) -> None:
    job_id = web.fresh_job()
    occ = web.kernel.run_now(job_id, request_id="h1", operator="t", force=True).occurrence.id
    web.kernel.claim(occ, owner="w", lease=60)
    web.kernel.fail(occ, owner="w", fence=1, code="X", message="x", retryable=False)
    with web.api(web.tokens["viewer"]) as api:
        one = api.get(f"/api/jobs/{job_id}")
        assert one.status_code == 200, one.text
        listed = {j["id"]: j for j in api.get("/api/jobs").json()}
    health = one.json()["health"]
    assert health["consecutive_failures"] == 1
    assert health["last_failure_at"] == web.kernel.get_occurrence(occ).to_dict()["settled_at"]
    assert health["last_success_at"] is None
    assert listed[job_id]["health"] == health
