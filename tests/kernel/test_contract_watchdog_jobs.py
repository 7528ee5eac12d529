"""Watchdog jobs' verdicts, settled: the alert event, the failing list and self-destruct,
each in the transaction that settles the run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _watchdog(k: Harness, job_id: str, **payload: Any) -> None:
    k.define(job_id, kind="watchdog", payload={"check": {"argv": ["check-disk"]}, **payload})


def _settle(k: Harness, job_id: str, passed: bool) -> int:
    """One run of ``job_id`` claimed and settled with the verdict of a check that passed or not."""
    claim = k.kernel.claim(k.fire(job_id).created[0], owner="w1", lease=30)
    assert claim is not None
    verdict = {
        "passed": passed,
        "reason": None if passed else "exit",
        "exit_code": 0 if passed else 2,
        "message": "" if passed else "'check-disk' exited with code 2",
        "output_tail": "" if passed else "/var 97%",
        "delivered": None,
    }
    k.kernel.succeed(
        claim.occurrence.id, owner="w1", fence=claim.fence, result={"watchdog": verdict}
    )
    return claim.occurrence.id


def test_a_failing_check_alerts_and_keeps_watching_until_one_passes(k: Harness) -> None:
    _watchdog(k, "disk", self_destruct=False, target="db disk")
    failed = _settle(k, "disk", passed=False)
    [alert] = [e for e in k.kernel.events(occurrence_id=failed) if e.type == "watchdog_alert"]
    assert alert.job_id == "disk" and alert.fence == 1
    assert alert.data == {
        "target": "db disk",
        "check": "check-disk",
        "reason": "exit",
        "exit_code": 2,
        "message": "'check-disk' exited with code 2",
        "output_tail": "/var 97%",
        "watch_over": False,
        "delivered": None,
    }
    k.clock.advance(5)
    [failing] = k.kernel.watchdog()["failing_watchdogs"]
    assert failing["job_id"] == "disk" and failing["occurrence_id"] == failed
    assert failing["exit_code"] == 2 and failing["age_ms"] == 5000
    assert k.kernel.get_job("disk").enabled
    passed = _settle(k, "disk", passed=True)
    assert "watchdog_alert" not in k.event_types(passed)
    assert k.kernel.watchdog()["failing_watchdogs"] == []
    assert k.kernel.get_job("disk").enabled  # self_destruct false


def test_a_passing_check_self_destructs_the_watchdog(k: Harness) -> None:
    _watchdog(k, "until-up")
    occ = _settle(k, "until-up", passed=True)
    assert not k.kernel.get_job("until-up").enabled
    events = k.kernel.events(job_id="until-up", limit=100)
    assert "watchdog_alert" not in {e.type for e in events}
    [gone] = [e for e in events if e.type == "job_disabled"]
    assert gone.data == {"revision": 1, "reason": "watchdog_check_passed"}
    assert gone.id > max(e.id for e in events if e.occurrence_id == occ)  # with the settle


def test_a_watch_that_is_over_alerts_and_self_destructs(k: Harness) -> None:
    _watchdog(k, "deadline", watch_for="1m")
    k.clock.advance(59)
    _settle(k, "deadline", passed=False)  # within the watch: alert, keep watching
    assert k.kernel.get_job("deadline").enabled
    k.clock.advance(1)
    last = _settle(k, "deadline", passed=False)
    [alert] = [e for e in k.kernel.events(occurrence_id=last) if e.type == "watchdog_alert"]
    assert alert.data["watch_over"] is True
    assert not k.kernel.get_job("deadline").enabled
    assert [e.data["reason"] for e in k.kernel.events(job_id="deadline", limit=100)
            if e.type == "job_disabled"] == ["watchdog_watch_over"]  # fmt: skip
    # The failing state outlives the disabled job, for status to report.
    assert [f["job_id"] for f in k.kernel.watchdog()["failing_watchdogs"]] == ["deadline"]


def test_a_watch_starts_at_started_at_when_given(k: Harness) -> None:
    _watchdog(k, "old", watch_for="1h", started_at="2000-01-01T00:00:00Z", self_destruct=False)
    occ = _settle(k, "old", passed=False)
    [alert] = [e for e in k.kernel.events(occurrence_id=occ) if e.type == "watchdog_alert"]
    assert alert.data["watch_over"] is True
    assert k.kernel.get_job("old").enabled  # over, but it does not self-destruct


def test_another_kinds_verdict_shaped_result_is_only_a_result(k: Harness) -> None:
    claim = k.running("plain")
    result = {"watchdog": {"passed": False, "reason": "exit"}}
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence, result=result)
    assert "watchdog_alert" not in k.event_types(claim.occurrence.id)
    assert k.kernel.watchdog()["failing_watchdogs"] == []


def test_a_report_settled_with_the_next_claim_alerts_in_that_transaction(k: Harness) -> None:
    # A batch's run settled by succeed_and_claim: its report counts as succeed's does.
    _watchdog(k, "batch", self_destruct=False)
    claim = k.kernel.claim(k.fire("batch").created[0], owner="w1", lease=30)
    assert claim is not None
    k.define("next")
    nxt = k.fire("next").created[0]
    verdict = {"passed": False, "reason": "exit", "exit_code": 1, "message": "m"}
    got = k.kernel.succeed_and_claim(
        claim.occurrence.id,
        owner="w1",
        fence=claim.fence,
        result={"watchdog": verdict},
        next_occurrence_id=nxt,
    )
    assert got is not None and got.occurrence.id == nxt
    assert "watchdog_alert" in k.event_types(claim.occurrence.id)
