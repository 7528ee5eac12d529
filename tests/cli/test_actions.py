"""Operator actions (pause, resume, requeue, adjudicate, cancel) against a real kernel."""

from __future__ import annotations

import time

from cli.support import define

from celery_app.cli.actions import default_operator
from kernel import Kernel


def _running(kernel: Kernel, job_id: str = "a", **fields: object) -> int:
    define(kernel, job_id, **fields)
    occ = kernel.run_now(job_id, request_id=f"run-{job_id}", operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w1", lease=60)
    return occ


def _events(kernel: Kernel, kind: str) -> list[dict[str, object]]:
    return [e.data for e in kernel.events(limit=1000) if e.type == kind]


def test_pause_uses_the_current_fence_and_the_adapters_safe_points(cli, kernel: Kernel) -> None:
    occ = _running(kernel)
    result = cli("pause", str(occ), "--request-id", "p1", "--operator", "alice", "--json")
    assert result.code == 0, result.out
    data = result.json()
    assert (data["request_id"], data["deduplicated"], data["operator"]) == ("p1", False, "alice")
    assert data["occurrence"]["control"]["state"] == "pause_requested"
    assert kernel.renew(occ, owner="w1", fence=1, lease=60).pause.safe_points == (
        "adapter_checkpoint",
        "before_execute",
    )
    replay = cli("pause", str(occ), "--request-id", "p1")
    assert replay.code == 0
    assert "p1 (deduplicated" in replay.out
    assert _events(kernel, "occurrence_pause_requested")[0]["operator"] == "alice"


def test_pause_is_unsupported_for_a_shell_job(cli, kernel: Kernel) -> None:
    occ = _running(kernel, kind="shell", payload={"argv": ["/bin/true"]})
    result = cli("pause", str(occ), "--json")
    assert (result.code, result.json()["error"]["code"]) == (1, "PAUSE_UNSUPPORTED")
    text = cli("pause", str(occ))
    assert text.err.startswith("Error PAUSE_UNSUPPORTED:")
    assert "request id: " in text.err


def test_pause_with_a_stale_fence_is_refused(cli, kernel: Kernel) -> None:
    occ = _running(kernel)
    result = cli("pause", str(occ), "--fence", "7", "--json")
    assert result.json()["error"]["code"] == "FENCE_CONFLICT"
    assert kernel.get_occurrence(occ).control is None


def test_resume_a_paused_occurrence(cli, kernel: Kernel) -> None:
    occ = _running(kernel)
    kernel.request_pause(
        occ, expected_fence=1, request_id="p", safe_points=["adapter_checkpoint"], operator="t"
    )
    kernel.ack_pause(
        occ,
        owner="w1",
        fence=1,
        request_id="p",
        expected_revision=None,
        safe_point="adapter_checkpoint",
        checkpoint={"step": 3},
    )
    stale = cli("resume", str(occ), "--revision", "1", "--json")
    assert stale.json()["error"]["code"] == "REVISION_CONFLICT"
    result = cli("resume", str(occ), "--revision", "2")
    assert result.code == 0
    assert "control           resumed" in result.out
    claim = kernel.claim(occ, owner="w2", lease=60)
    assert claim is not None and (claim.resumed, claim.checkpoint) == (True, {"step": 3})
    again = cli("resume", str(occ), "--json")
    assert again.json()["error"]["code"] == "STATE_CONFLICT"


def test_requeue_a_dead_letter_with_its_evidence(cli, kernel: Kernel) -> None:
    occ = _running(kernel)
    kernel.fail(occ, owner="w1", fence=1, code="HTTP_404", message="gone", retryable=False)
    wrong = cli("requeue", str(occ), "--error-code", "HTTP_500", "--json")
    assert wrong.json()["error"]["code"] == "EVIDENCE_CONFLICT"
    result = cli("requeue", str(occ), "--request-id", "rq", "--json")
    assert result.json()["occurrence"]["status"] == "retry_wait"
    assert cli("requeue", str(occ), "--request-id", "rq", "--json").json()["deduplicated"] is True
    text = cli("requeue", str(occ))
    assert text.code == 1
    assert text.err.startswith("Error STATE_CONFLICT:")
    claim = kernel.claim(occ, owner="w2", lease=60)
    assert claim is not None and claim.occurrence.attempt == 1


def test_adjudicate_an_at_most_once_run(cli, kernel: Kernel) -> None:
    define(kernel, "once", delivery="at-most-once")
    occ = kernel.run_now("once", request_id="r", operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w1", lease=0.01)
    time.sleep(0.05)
    assert kernel.expire_leases()["needs_adjudication"] == 1
    bad = cli("adjudicate", str(occ), "--decision", "maybe", "--json")
    assert (bad.code, bad.json()["error"]["code"]) == (2, "USAGE")
    assert cli("adjudicate", str(occ), "--json").code == 2
    result = cli("adjudicate", str(occ), "--decision", "applied", "--operator", "bob")
    assert result.code == 0
    assert "status            succeeded" in result.out
    assert _events(kernel, "occurrence_adjudicated")[0]["operator"] == "bob"
    assert (
        cli("adjudicate", str(occ), "--decision", "abandon", "--json").json()["error"]["code"]
        == "STATE_CONFLICT"
    )


def test_cancel_waiting_and_running(cli, kernel: Kernel) -> None:
    running = _running(kernel)
    waiting = kernel.run_now("a", request_id="second", operator="t", force=True).occurrence.id
    done = cli("cancel", str(waiting), "--json").json()
    assert done["occurrence"]["status"] == "cancelled"
    assert done["operator"] == default_operator()
    asked = cli("cancel", str(running))
    assert "cancel requested  yes" in asked.out
    assert kernel.renew(running, owner="w1", fence=1, lease=60).cancel_requested
    again = cli("cancel", str(waiting), "--json")
    assert again.json()["error"]["code"] == "STATE_CONFLICT"


def test_actions_on_an_unknown_occurrence(cli, kernel: Kernel) -> None:
    for args in (
        ("pause", "404"),
        ("resume", "404"),
        ("requeue", "404"),
        ("cancel", "404"),
        ("adjudicate", "404", "--decision", "applied"),
    ):
        result = cli(*args, "--request-id", "x", "--json")
        assert (result.code, result.json()["error"]["code"]) == (1, "NOT_FOUND"), args
        assert result.json()["error"]["details"]["request_id"] == "x"
        assert cli(*args).err.startswith("Error NOT_FOUND: occurrence 404 does not exist")
