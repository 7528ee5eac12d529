"""``kernel why JOB --at TIME`` answers from the durable record."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

from cli.support import define

from beat_schedule.timing import trigger_key
from celery_app.operations import nearest_firing
from kernel import Kernel

T = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _fire(
    kernel: Kernel,
    job_id: str,
    *,
    fire: list[datetime],
    missed: list[datetime] = (),
    cursor: datetime,
) -> None:
    """Materialise firings as Beat does: one cursor advance by compare-and-set."""
    job = kernel.get_job(job_id)
    report = kernel.fire(
        job_id,
        expected_revision=job.revision,
        expected_cursor=job.next_trigger_key if job.planned else None,
        firings=[(trigger_key("every", at), at) for at in fire],
        missed=[(trigger_key("every", at), at) for at in missed],
        missed_reason="catchup_latest",
        next_cursor=(trigger_key("every", cursor), cursor),
    )
    assert not report.stale


def _why(cli, job_id: str, at: datetime) -> dict[str, object]:
    result = cli("why", job_id, "--at", at.isoformat(), "--json")
    assert result.code == 0, result.out
    return result.json()


def test_nearest_firing_picks_the_closer_side() -> None:
    hourly = {"cron": "0 * * * *", "timezone": "UTC"}
    at = datetime(2030, 1, 1, 12, 20, tzinfo=UTC)
    assert nearest_firing(hourly, {}, at, anchor=at).at == datetime(2030, 1, 1, 12, tzinfo=UTC)
    assert nearest_firing(hourly, {}, at + timedelta(minutes=20), anchor=at).at == datetime(
        2030, 1, 1, 13, tzinfo=UTC
    )
    yearly = {"cron": "0 0 1 1 *", "timezone": "UTC"}
    assert nearest_firing(yearly, {}, datetime(2030, 5, 1, tzinfo=UTC), anchor=at).at == datetime(
        2030, 1, 1, tzinfo=UTC
    )


def test_a_created_occurrence_and_its_outcome(cli, kernel: Kernel) -> None:
    define(kernel, "a", schedule={"every": "60s"})
    _fire(kernel, "a", fire=[T], missed=[T - MINUTE], cursor=T + MINUTE)
    occ = kernel.list_occurrences(job_id="a", statuses=["queued"])[0].id
    kernel.claim(occ, owner="w", lease=60)
    kernel.fail(occ, owner="w", fence=1, code="BOOM", message="x", retryable=False)

    data = _why(cli, "a", T + timedelta(seconds=10))
    assert data["firing"] == {
        "at": "2030-01-01T12:00:00Z",
        "trigger_key": "every:2030-01-01T12:00:00Z",
    }
    assert (data["outcome"], data["occurrence"]["status"]) == ("created", "dead_letter")
    assert [e["type"] for e in data["events"]][-1] == "occurrence_dead_letter"
    text = cli("why", "a", "--at", "2030-01-01T12:00:10").out
    assert "outcome         created" in text
    assert "it is dead_letter" in text

    skipped = _why(cli, "a", T - MINUTE)
    assert (skipped["outcome"], skipped["reason"]) == (
        "skipped",
        "recorded as skipped: catchup_latest (Beat was down; catch-up latest runs only the most "
        "recent missed firing)",
    )


def test_a_firing_still_ahead_is_not_due(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    data = _why(cli, "a", datetime(2999, 1, 1, tzinfo=UTC))
    assert data["outcome"] == "not_due"
    assert "still ahead" in data["reason"]


def test_a_firing_before_the_job_existed_is_not_due(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    data = _why(cli, "a", datetime(2001, 1, 1, tzinfo=UTC))
    assert data["outcome"] == "not_due"
    assert "was defined at" in data["reason"]


def test_disabled_pending_and_not_created(cli, kernel: Kernel) -> None:
    for job_id in ("off", "waiting", "passed"):
        define(kernel, job_id, schedule={"every": "1s"})
    kernel.set_job_enabled("off", False)
    time.sleep(1.1)
    now = kernel.now()
    # A Beat planned "passed" from a later time, as after an enable: this firing is owed to no one.
    _fire(kernel, "passed", fire=[], cursor=now + timedelta(seconds=30))
    kernel.set_job_enabled("off", True)
    asked = now - timedelta(seconds=0.5)

    off = _why(cli, "off", asked)
    assert off["outcome"] == "disabled"
    assert _why(cli, "waiting", asked)["outcome"] == "pending"
    passed = _why(cli, "passed", asked)
    assert passed["outcome"] == "not_created"
    assert "cursor passed" in passed["reason"]
    assert "outcome         disabled" in cli("why", "off", "--at", asked.isoformat()).out


def test_a_job_without_schedule_shows_its_nearest_occurrence(cli, kernel: Kernel) -> None:
    define(kernel, "manual", schedule=None)
    occ = kernel.run_now("manual", request_id="r", operator="t", force=True).occurrence
    data = _why(cli, "manual", occ.scheduled_for + timedelta(minutes=5))
    assert (data["outcome"], data["firing"], data["occurrence"]["id"]) == (
        "no_schedule",
        None,
        occ.id,
    )
    assert "manual" in cli("why", "manual", "--at", occ.scheduled_for.isoformat()).out


def test_bad_input(cli, kernel: Kernel) -> None:
    assert (
        cli("why", "ghost", "--at", "2030-01-01T00:00:00Z", "--json").json()["error"]["code"]
        == "NOT_FOUND"
    )
    define(kernel, "a")
    bad = cli("why", "a", "--at", "yesterday-ish", "--json")
    assert (bad.code, bad.json()["error"]["code"]) == (2, "USAGE")
    assert "ISO 8601" in bad.json()["error"]["message"]
    assert cli("why", "a").code == 2


def test_an_admission_skip_and_a_cancelled_job_are_explained(cli, kernel: Kernel) -> None:
    define(kernel, "a", schedule={"every": "60s"}, overlap="allow", max_queued=1)
    _fire(kernel, "a", fire=[T, T + MINUTE], cursor=T + 2 * MINUTE)
    full = _why(cli, "a", T + MINUTE)
    assert full["outcome"] == "skipped"
    assert full["reason"].startswith("recorded as skipped: queue_full (max_queued")

    define(kernel, "b", schedule={"every": "1s"})
    kernel.cancel_job("b", request_id="c1", operator="t")
    time.sleep(1.1)
    off = _why(cli, "b", kernel.now() - timedelta(seconds=0.5))
    assert off["outcome"] == "disabled"
    assert off["reason"].endswith("it was cancelled (kernel jobs cancel)")


def test_a_time_past_the_calendar_is_one_line_not_a_traceback(cli, kernel: Kernel) -> None:
    """Issue 24: ``why``/``preview`` near year 1 or 9999 raised OverflowError. Schedules fire
    from 1970 to 9000 (issue 41): a question asked from or up to the calendar's ends is
    answered within those years."""
    define(kernel, "edge", schedule={"every": "60s"})
    define(kernel, "decade", schedule={"every": "3650d"})
    result = cli("why", "edge", "--at", "0001-01-01T00:00:00")
    assert result.code == 1 and "INVALID_ARGUMENT" in result.err, (result.out, result.err)
    assert "years 1 to 9999" in result.err and "Traceback" not in result.err
    for args in (
        ("why", "edge", "--at", "9999-12-31T23:59:59", "--json"),
        ("jobs", "preview", "edge", "--after", "0001-01-01T00:00:00", "--json"),
        ("jobs", "preview", "edge", "--after", "9999-12-31T23:59:59", "--json"),
        ("jobs", "preview", "decade", "--next", "1000", "--json"),
    ):
        result = cli(*args)
        assert result.code == 0, (args, result.out, result.err)
        assert "Traceback" not in result.err and "9001-" not in result.out, args
    firings = json.loads(cli("jobs", "preview", "decade", "--next", "1000", "--json").out)
    assert 0 < len(firings["firings"]) < 1000
    assert firings["firings"][-1]["utc"] < "9000-01-01T00:00:01Z"
    for args in (
        ("why", "edge", "--at", "0001-01-01T00:00:00+14:00"),
        ("jobs", "preview", "edge", "--after", "0001-01-01T00:00:00+14:00"),
    ):
        result = cli(*args)
        assert result.code == 2, (args, result.out, result.err)
        assert "years 1 to 9999" in result.err and "Traceback" not in result.err, args


def test_an_occurrence_tells_its_whole_story(cli, kernel: Kernel) -> None:
    define(kernel, "story", schedule=None, max_attempts=3)
    occ = kernel.run_now("story", request_id="r1", operator="alice").occurrence.id
    claim = kernel.claim(occ, owner="w1", lease=60)
    kernel.request_pause(occ, expected_fence=claim.fence, request_id="p1", operator="bob",
                         safe_points=["before_execute", "adapter_checkpoint"])  # fmt: skip
    control = kernel.get_occurrence(occ).control
    kernel.ack_pause(occ, owner="w1", fence=claim.fence, request_id="p1",
                     expected_revision=control.revision, safe_point="adapter_checkpoint",
                     checkpoint={"row": 5})  # fmt: skip
    kernel.resume(occ, request_id="res1", operator="bob")
    claim = kernel.claim(occ, owner="w2", lease=60)
    kernel.fail(occ, owner="w2", fence=claim.fence, code="BOOM", message="boom")

    data = cli("why", str(occ), "--json").json()
    assert (data["job_id"], data["status"]) == ("story", "retry_wait")
    texts = [step["text"] for step in data["story"]]
    assert texts[0] == "created by run-now (request r1); admitted: queued", texts
    assert "claimed by w1 (attempt 1)" in texts
    assert "pause requested by bob" in texts and "resumed by bob" in texts
    assert any(t.startswith("paused at safe point adapter_checkpoint") for t in texts), texts
    assert "claimed by w2 (attempt 1), resuming from its checkpoint" in texts
    assert any(t.startswith("attempt 1 failed: BOOM boom; retry at ") for t in texts), texts
    assert all(isinstance(s["since_previous_s"], float) for s in data["story"])
    text = cli("why", str(occ)).out
    assert "claimed by w2 (attempt 1), resuming from its checkpoint" in text

    # Settled without a run: cancelled while queued.
    other = kernel.run_now("story", request_id="r2", operator="alice", force=True).occurrence.id
    kernel.cancel(other, request_id="c2", operator="carol")
    told = [s["text"] for s in cli("why", str(other), "--json").json()["story"]]
    assert told[-1] == "cancelled", told

    missing = cli("why", "999999", "--json")
    assert (missing.code, missing.json()["error"]["code"]) == (1, "NOT_FOUND")
    job_without_at = cli("why", "story", "--json")
    assert (job_without_at.code, job_without_at.json()["error"]["code"]) == (2, "USAGE")


def test_why_asks_about_now_and_relative_times_in_human_durations(cli, kernel: Kernel) -> None:
    define(kernel, "hourly", schedule={"every": "1h"})
    for at in ("now", "-5m", "+2m"):
        result = cli("why", "hourly", "--at", at, "--json")
        assert result.code == 0, (at, result.out)
    ahead = cli("why", "hourly", "--at", "+59m", "--json").json()
    assert ahead["outcome"] == "not_due", ahead
    assert re.search(r"still ahead \(in \d+[hm]\d\d[ms]\)$", ahead["reason"]), ahead["reason"]
    far = cli("why", "hourly", "--at", "2999-01-01T00:00:00Z").out
    assert re.search(r"still ahead \(in \d+d\d+h\)", far), far


def test_a_run_now_behind_an_unresolved_run_says_what_it_waits_for(cli, kernel: Kernel) -> None:
    """Issue 39 item 9: ``why`` and a forced ``run-now`` name the run it waits behind."""
    define(kernel, "charge", schedule=None, delivery="at-most-once", max_attempts=3)
    first = kernel.run_now("charge", request_id="r1", operator="alice").occurrence.id
    claim = kernel.claim(first, owner="w1", lease=60)
    kernel.fail(first, owner="w1", fence=claim.fence, code="TIMEOUT", message="no answer",
                effect="unknown")  # fmt: skip
    assert kernel.get_occurrence(first).status == "needs_adjudication"

    forced = cli("jobs", "run-now", "charge", "--force", "--request-id", "r2")
    assert forced.code == 0, forced.out
    waiting = f"awaiting adjudication of occurrence {first} (at-most-once)"
    assert re.search(rf"^waiting for\s+{re.escape(waiting)}$", forced.out, re.M), forced.out
    second = int(re.search(r"^occurrence\s+(\d+)", forced.out, re.M).group(1))

    data = cli("why", str(second), "--json").json()
    assert data["blocker"]["kind"] == "awaiting_adjudication"
    assert data["blocker"]["waits_for"] == first
    assert waiting in cli("why", str(second)).out
    told = cli("why", str(first), "--json").json()["blocker"]
    assert (told["kind"], told["waits_for"]) == ("awaiting_adjudication", first)
