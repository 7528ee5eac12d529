"""The chaos checker, tested by mutation and on made-up runs; no hosts needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from multihost.checker import VIOLATIONS, Row, _continuations, check
from multihost.evidence import Evidence, Handback
from multihost.mutations import T0, _replace_row, _rewrite, clean_run, self_test
from multihost.report import failed

CHAOS = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


def by_name(rows: list[Row]) -> dict[str, Row]:
    return {row.fault: row for row in rows}


def test_self_test_flags_each_violation_in_its_own_column_only() -> None:
    done = subprocess.run(
        [sys.executable, str(CHAOS), "--self-test"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    flagged = dict(line.split(None, 1) for line in done.stdout.splitlines()[1:-1])
    assert set(flagged) == {"clean", *VIOLATIONS}
    assert flagged["clean"].split() == ["none", "ok"]
    for column in VIOLATIONS:
        assert flagged[column].split() == [f"{column}=1", "ok"]


def test_self_test_says_wrong_when_the_checker_misses_a_violation(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from multihost import mutations

    monkeypatch.setitem(
        mutations.MUTANTS, "early", lambda ev: None
    )  # a mutant that changes nothing
    shown, ok = self_test()
    assert not ok
    assert "early        none" in shown and "WRONG" in shown


def test_a_clean_run_passes_and_counts_skips_with_their_reason_against_the_schedule() -> None:
    rows = by_name(check(clean_run()))
    assert not failed(list(rows.values()))
    assert sum(row.expected for row in rows.values()) == 21
    assert rows["pause"].skipped == 1
    assert dict(rows["pause"].skip_reasons) == {"overlap: skip": 1}
    assert rows["kill"].counts["resumed"] == 1  # paused under "pause", resumed after "kill"


def test_a_skip_without_a_reason_is_a_lost_firing() -> None:
    evidence = clean_run()
    evidence.rows = [
        row if row.status != "skipped" else type(row)(**{**row.__dict__, "skip_reason": None})
        for row in evidence.rows
    ]
    rows = check(evidence)
    assert sum(row.counts["lost"] for row in rows) == 1
    assert sum(row.skipped for row in rows) == 0


def test_a_rerun_is_charged_to_the_window_it_started_in_not_the_due_times() -> None:
    # alo due T0+5 lost its lease under "kill" and was rerun at T0+11.1, under "later".
    evidence = clean_run()
    evidence.faults = [*evidence.faults, type(evidence.faults[0])("later", T0 + 10.0, "x")]
    rows = by_name(check(evidence))
    assert (rows["kill"].counts["reruns"], rows["later"].counts["reruns"]) == (0, 1)
    assert rows["kill"].observed == ["kill -9 worker h1; 1 resumed, 0 late writes, 0 overlaps"]
    assert rows["later"].observed == ["x; 1 reruns, 0 late writes, 0 overlaps"]


def test_a_pause_or_warm_shutdown_that_hit_no_run_fails_the_run() -> None:
    evidence = clean_run()
    evidence.handbacks = [*evidence.handbacks, Handback("warm", T0 + 6, ())]
    rows = by_name(check(evidence))
    assert rows["kill"].counts["handback"] == 1
    assert failed(list(rows.values()))


def test_a_worker_ended_by_its_broker_transport_is_information_any_other_exit_fails() -> None:
    evidence = clean_run()
    kombu = "Unrecoverable error: AttributeError(\"'NoneType' object has no attribute 'hostname'\")"
    evidence.exits = [(T0 + 7, f"worker-h1-4: [CRITICAL/MainProcess] {kombu}")]
    rows = list(check(evidence))
    assert sum(row.counts["transport_exit"] for row in rows) == 1
    assert not failed(rows)

    evidence.exits = [*evidence.exits, (T0 + 8, "worker-h2-1: exit status 1")]
    rows = list(check(evidence))
    assert sum(row.counts["exit"] for row in rows) == 1
    assert failed(rows)


def test_runs_held_behind_an_unresolved_at_most_once_run_wait_for_its_verdict() -> None:
    evidence = clean_run()
    dues = sorted(r.scheduled_for for r in evidence.rows if r.job_id == "amo")
    unresolved, held = dues[2], dues[3:]
    _rewrite(evidence, "amo", unresolved, [("start", 1, 0.1)], [("claimed", 1, 0.05)], 1)
    _replace_row(evidence, "amo", unresolved, status="needs_adjudication")
    for due in held:  # the kernel claims none of them until the verdict
        _rewrite(evidence, "amo", due, [], [], 0)
        _replace_row(evidence, "amo", due, status="queued", fence=0)
    rows = list(check(evidence))
    assert not failed(rows), [row.notes for row in rows if row.notes]
    assert sum(row.counts["adjudicate"] for row in rows) == 1 + len(held)

    # Without the unresolved run the same queued firings are lost and stuck.
    _replace_row(evidence, "amo", unresolved, status="succeeded")
    rows = list(check(evidence))
    assert sum(row.counts["lost"] for row in rows) == len(held)
    assert sum(row.counts["stuck"] for row in rows) == len(held)


def _canvas_notes(rows: list[Row], column: str) -> list[str]:
    return [note for row in rows for note in row.notes if note.startswith(f"{column}:")]


def _without(evidence: Evidence, **match: Any) -> None:
    evidence.lines = [x for x in evidence.lines if not all(x.get(k) == v for k, v in match.items())]


def _end(evidence: Evidence, **match: Any) -> dict[str, Any]:
    [line] = [
        x
        for x in evidence.lines
        if x.get("phase") == "end" and all(x.get(k) == v for k, v in match.items())
    ]
    return line


def test_canvases_are_judged_from_the_ledger_a_rerun_under_one_id_is_no_second_run() -> None:
    rows = check(clean_run())
    assert not failed(rows)
    # The clean run's chord body ran twice under one id (its worker died after its end):
    # at least once, not a second body. The apply refused by a fault made nothing.
    assert sum(row.counts["canvas"] for row in rows) == 4
    assert sum(row.counts["canvas_reruns"] for row in rows) == 1


def test_a_chord_whose_body_never_ran_or_got_its_results_out_of_order_is_a_chord_violation() -> (
    None
):
    evidence = clean_run()
    _without(evidence, role="body")
    assert _canvas_notes(check(evidence), "chord") == [
        "chord: chord-a: body made 0 times (once owed), ids []"
    ]
    evidence = clean_run()
    for line in evidence.lines:
        if line.get("role") == "body":
            line["results"] = list(reversed(line["results"]))
    [note] = _canvas_notes(check(evidence), "chord")
    assert "not the members' in order" in note


def test_a_failed_chord_s_body_or_a_second_errback_is_a_chord_violation() -> None:
    evidence = clean_run()
    errback = _end(evidence, canvas="chord-b", role="errback")
    evidence.lines.append({**errback, "task_id": "errbacks:9:0"})
    assert _canvas_notes(check(evidence), "chord") == [
        "chord: chord-b: errback made 2 times (once owed)"
    ]
    evidence = clean_run()
    body = _end(evidence, task_id="body-a", attempt=1)
    evidence.lines.append({**body, "canvas": "chord-b", "task_id": "body-b"})
    assert _canvas_notes(check(evidence), "chord") == [
        "chord: chord-b: body ran although member 1 failed"
    ]


def test_a_chain_step_started_before_the_one_before_it_finished_is_a_chain_violation() -> None:
    evidence = clean_run()
    steps = [i for i, x in enumerate(evidence.lines) if x.get("role") == "step"]
    first_end, second_start = steps[1], steps[2]
    lines = evidence.lines
    lines[first_end], lines[second_start] = lines[second_start], lines[first_end]
    assert _canvas_notes(check(evidence), "chain") == [
        "chain: chain-a: step 1 started before step 0 finished"
    ]


def test_a_run_ended_past_its_renewed_checkpoint_is_a_rewind_only_if_its_settle_landed() -> None:
    """Fence 1 stored step 2's checkpoint with a renewal and ran to its end; fence 2
    resumed from step 2. Its settle never landed (the database was away): at-least-once
    redoes those steps. Had the kernel logged its settle, the resume contradicts it."""
    written = [
        (0, {"event": "start", "fence": 1}),
        (1, {"event": "step", "fence": 1, "step": 1}),
        (2, {"event": "step", "fence": 1, "step": 2}),
        (3, {"event": "end", "fence": 1}),
        (4, {"event": "start", "fence": 2, "resumed_from": 2}),
        (5, {"event": "step", "fence": 2, "step": 2}),
        (6, {"event": "end", "fence": 2}),
    ]
    assert _continuations(written, handed_back=set(), settled={2}) == [(4, None)]
    [(index, rewind)] = _continuations(written, handed_back=set(), settled={1, 2})
    assert index == 4 and rewind is not None and "fence 1 went on past it 1 time(s)" in rewind
