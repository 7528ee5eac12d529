"""``kernel occurrences list|show`` against a real kernel, in both output modes."""

from __future__ import annotations

from cli.support import define

from kernel import Kernel

SPEC_FIELDS = {
    "id",
    "job_id",
    "status",
    "attempt",
    "max_attempts",
    "fence",
    "trigger_key",
    "scheduled_for",
    "last_error",
    "control",
}


def _three(kernel: Kernel) -> list[int]:
    """Occurrences 1..3 of job ``a`` (1 dead letter, 2 running, 3 queued) and 4 of job ``b``."""
    define(kernel, "a")
    define(kernel, "b")
    ids = [
        kernel.run_now("a", request_id=f"r{n}", operator="t", force=True).occurrence.id
        for n in range(3)
    ]
    kernel.run_now("b", request_id="rb", operator="t", force=True)
    for occ_id in ids[:2]:
        kernel.claim(occ_id, owner="w1", lease=30)
    kernel.fail(ids[0], owner="w1", fence=1, code="BOOM", message="it broke", retryable=False)
    return ids


def test_list_filters_by_job_and_status(cli, kernel: Kernel) -> None:
    ids = _three(kernel)
    everything = cli("occurrences", "list", "--json").json()
    assert [o["id"] for o in everything] == [4, 3, 2, 1]
    assert set(everything[0]) >= SPEC_FIELDS
    only_a = cli(
        "occurrences",
        "list",
        "--job",
        "a",
        "--status",
        "dead_letter",
        "--status",
        "running",
        "--json",
    )
    assert [(o["id"], o["status"]) for o in only_a.json()] == [
        (ids[1], "running"),
        (ids[0], "dead_letter"),
    ]
    assert only_a.json()[1]["last_error"] == {"code": "BOOM", "message": "it broke"}
    page = cli("occurrences", "list", "--limit", "2", "--before", "4", "--json").json()
    assert [o["id"] for o in page] == [3, 2]

    lines = cli("occurrences", "list", "--job", "a").out.splitlines()
    assert lines[0].split()[:4] == ["ID", "JOB", "STATUS", "ATTEMPT"]
    assert lines[3].split()[:5] == ["1", "a", "dead_letter", "1/3", "1"]
    assert lines[3].endswith("BOOM: it broke")


def test_empty_list(cli, kernel: Kernel) -> None:
    assert cli("occurrences", "list", "--json").json() == []
    assert cli("occurrences", "list").out.strip() == "(no occurrences)"


def test_an_unknown_status_is_a_usage_error(cli, kernel: Kernel) -> None:
    result = cli("occurrences", "list", "--status", "exploded", "--json")
    assert (result.code, result.json()["error"]["code"]) == (2, "USAGE")
    assert cli("occurrences", "list", "--status", "exploded").code == 2


def test_show_adds_checkpoint_result_and_events(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    occ = kernel.run_now("a", request_id="r", operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w1", lease=30)
    kernel.succeed(occ, owner="w1", fence=1, result={"rows": 7})
    shown = cli("occurrences", "show", str(occ), "--json").json()
    assert set(shown) >= SPEC_FIELDS
    assert (shown["status"], shown["result"], shown["checkpoint"]) == (
        "succeeded",
        {"rows": 7},
        None,
    )
    assert [e["type"] for e in shown["events"]] == [
        "occurrence_created",
        "job_run_now",
        "occurrence_claimed",
        "occurrence_succeeded",
    ]
    assert shown["definition"]["payload"]["callable"] == "os.path:join"
    text = cli("occurrences", "show", str(occ)).out
    assert "status            succeeded" in text
    assert 'result            {"rows":7}' in text
    assert "occurrence_claimed" in text


def test_show_of_a_paused_occurrence_carries_its_checkpoint(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    occ = kernel.run_now("a", request_id="r", operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w1", lease=30)
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
        checkpoint={"done": 41},
    )
    shown = cli("occurrences", "show", str(occ), "--json").json()
    assert shown["checkpoint"] == {"done": 41}
    assert shown["control"]["state"] == "paused"
    text = cli("occurrences", "show", str(occ)).out
    assert "control           paused (revision 2)" in text
    # One word for it: paused, in show, list, the filter and the counts (once).
    assert "status            paused\n" in text, text
    assert [o["id"] for o in cli("occurrences", "list", "--status", "paused", "--json").json()] == [
        occ
    ]
    counts = cli("status", "--json").json()["counts"]
    assert (counts["paused"], counts["retry_wait"]) == (1, 0), counts


def test_unknown_occurrence(cli, kernel: Kernel) -> None:
    result = cli("occurrences", "show", "999", "--json")
    assert (result.code, result.json()["error"]["code"]) == (1, "NOT_FOUND")
    assert (
        cli("occurrences", "show", "999").err.strip()
        == "Error NOT_FOUND: occurrence 999 does not exist"
    )
    assert cli("occurrences", "show", "nine").code == 2


def test_show_of_a_running_occurrence_prints_its_progress(cli, kernel: Kernel) -> None:
    """The checkpoint the run gave with its last lease renewal is its progress, shown while
    it runs."""
    define(kernel, "a")
    occ = kernel.run_now("a", request_id="r", operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w1", lease=30)
    kernel.renew(occ, owner="w1", fence=1, lease=30, checkpoint={"done": 3})
    shown = cli("occurrences", "show", str(occ), "--json").json()
    assert (shown["status"], shown["checkpoint"]) == ("running", {"done": 3})
    assert 'checkpoint        {"done":3}' in cli("occurrences", "show", str(occ)).out
