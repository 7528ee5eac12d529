"""Watchdog jobs on the command line: ``kernel status`` warns of a failing one (text and
``--json``; ``--fail-on-stale-beat`` still asks only about Beat), ``kernel why`` explains
a self-destructed one."""

from __future__ import annotations

import time
from datetime import timedelta

from kernel import Kernel


def _settled_check(kernel: Kernel, job_id: str, *, passed: bool) -> int:
    occ = kernel.run_now(job_id, request_id=f"{job_id}-{passed}", operator="t", force=True)
    claim = kernel.claim(occ.occurrence.id, owner="w", lease=60)
    assert claim is not None
    verdict = {
        "passed": passed,
        "reason": None if passed else "exit",
        "exit_code": None if passed else 1,
        "message": "no",
        "output_tail": "",
        "delivered": None,
    }
    kernel.succeed(claim.occurrence.id, owner="w", fence=claim.fence, result={"watchdog": verdict})
    return claim.occurrence.id


def test_status_warns_of_each_failing_watchdog(cli, kernel: Kernel) -> None:
    for job_id in ("ok", "bad"):
        payload = {"check": {"argv": ["check"]}, "self_destruct": False}
        kernel.define_job({"id": job_id, "kind": "watchdog", "payload": payload})
    _settled_check(kernel, "ok", passed=True)
    failed = _settled_check(kernel, "bad", passed=False)
    kernel.record_beat("beat-1", host="h1", interval=60)

    data = cli("status", "--json").json()
    [failing] = data["watchdog"]["failing_watchdogs"]
    assert failing["job_id"] == "bad" and failing["occurrence_id"] == failed
    [warning] = data["warnings"]
    assert warning.startswith("watchdog bad is failing (exit code 1, checked ")
    assert warning.endswith(f"ago): no; `kernel occurrences show {failed}`")
    text = cli("status")
    assert "WARNING: watchdog bad is failing (exit code 1" in text.out
    assert "watchdog ok" not in text.out
    assert cli("status", "--fail-on-stale-beat").code == 0


def test_why_explains_a_self_destructed_watchdog(cli, kernel: Kernel) -> None:
    payload = {"check": {"argv": ["check"]}}
    spec = {"id": "until-up", "kind": "watchdog", "schedule": {"every": "1s"}, "payload": payload}
    kernel.define_job(spec)
    _settled_check(kernel, "until-up", passed=True)
    time.sleep(1.1)
    asked = (kernel.now() - timedelta(seconds=0.5)).isoformat()
    off = cli("why", "until-up", "--at", asked, "--json").json()
    assert off["outcome"] == "disabled"
    assert off["reason"].endswith("it is a watchdog whose check passed (self_destruct)")


def test_status_warns_of_a_stranded_occurrence_and_not_of_a_held_one(
    cli, kernel: Kernel, monkeypatch
) -> None:
    """Issue 39: claimable past the watchdog's grace, nothing holding it, unclaimed."""
    monkeypatch.setenv("KERNEL_WATCHDOG_GRACE", "1")
    for job_id in ("free", "held"):
        spec = {"id": job_id, "kind": "callable", "payload": {"callable": "m:f"}, "pool": "p"}
        kernel.define_job({**spec, "pool": None} if job_id == "free" else spec)
    free = kernel.run_now("free", request_id="f", operator="t").occurrence.id
    for request_id in ("h1", "h2"):
        held = kernel.run_now("held", request_id=request_id, operator="t", force=True)
    assert kernel.claim(held.occurrence.id, owner="w", lease=600) is not None  # pool p full
    time.sleep(1.1)

    data = cli("status", "--json").json()
    assert [s["occurrence_id"] for s in data["watchdog"]["stranded"]] == [free]
    assert any(f"(occurrences {free})" in w for w in data["warnings"]), data["warnings"]
