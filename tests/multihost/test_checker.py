"""The ledger checker finds what it promises to find, on ledgers written by hand."""

from __future__ import annotations

from typing import Any

from multihost.checker import Expectation, FaultRecord, Row, check, failed

T0 = 1_000.0


def run(job: str, due: float, fence: int, event: str, t: float, host: str = "h1") -> dict[str, Any]:
    return {
        "event": event,
        "job_id": job,
        "scheduled_for": due,
        "fence": fence,
        "occurrence_id": int(due),
        "host": host,
        "t": t,
    }


def clean_runs(job: str, dues: range) -> list[dict[str, Any]]:
    lines = []
    for due in dues:
        lines += [run(job, due, 1, "start", due + 0.1), run(job, due, 1, "end", due + 0.4)]
    return lines


def judge(lines: list[dict[str, Any]], delivery: str = "at-least-once", **kw: Any) -> list[Row]:
    owed = [Expectation("j", delivery, 1, T0, T0 + 9)]
    faults = [FaultRecord("kill", T0 + 5)]
    return check(lines, faults, owed, skews=kw.get("skews", {}), adjudication=kw.get("adj", set()))


def by_name(rows: list[Row]) -> dict[str, Row]:
    return {row.fault: row for row in rows}


def test_a_clean_ledger_passes_and_firings_go_to_their_fault_window() -> None:
    rows = by_name(judge(clean_runs("j", range(1000, 1010))))
    assert (rows["baseline"].firings, rows["kill"].firings) == (5, 5)
    assert rows["kill"].injected == 1
    assert not failed(list(rows.values()))
    assert abs(rows["kill"].recovery_s - 0.4) < 1e-9


def test_a_firing_without_an_end_is_lost() -> None:
    lines = [
        x
        for x in clean_runs("j", range(1000, 1010))
        if (x["scheduled_for"], x["event"]) != (1007, "end")
    ]
    rows = by_name(judge(lines))
    assert (rows["baseline"].lost, rows["kill"].lost) == (0, 1)
    assert failed(list(rows.values()))


def test_at_most_once_twice_is_a_duplicate_and_waiting_for_an_operator_is_not_lost() -> None:
    lines = [
        x for x in clean_runs("j", range(1000, 1010)) if x["scheduled_for"] not in (1002, 1003)
    ]
    lines += [run("j", 1002, 1, "start", 1002.1), run("j", 1002, 2, "start", 1008.0)]
    rows = by_name(judge(lines, "at-most-once", adj={("j", 1003.0)}))
    assert (rows["baseline"].duplicates, rows["baseline"].lost, rows["baseline"].adjudicate) == (
        1,
        0,
        1,
    )
    assert failed(list(rows.values()))
    rows = by_name(judge([x for x in lines if x["fence"] == 1], "at-most-once"))
    assert rows["baseline"].lost == 1  # 1003: no effect and no operator decision pending


def test_a_fenced_off_run_that_keeps_writing_overlaps_and_writes_late() -> None:
    lines = [x for x in clean_runs("j", range(1000, 1010)) if x["scheduled_for"] != 1006]
    lines += [
        run("j", 1006, 1, "start", 1006.1),
        run("j", 1006, 2, "start", 1012.0),
        run("j", 1006, 1, "end", 1012.5),  # the old owner wrote while the new one ran
        run("j", 1006, 2, "end", 1013.0),
    ]
    kill = by_name(judge(lines))["kill"]
    assert (kill.overlaps, kill.late_writes, kill.reruns) == (1, 1, 1)


def test_a_write_after_the_new_run_ended_is_late_but_no_overlap() -> None:
    lines = [x for x in clean_runs("j", range(1000, 1010)) if x["scheduled_for"] != 1006]
    lines += [
        run("j", 1006, 1, "start", 1006.1),
        run("j", 1006, 2, "start", 1012.0),
        run("j", 1006, 2, "end", 1013.0),
        run("j", 1006, 1, "end", 1014.0),
    ]
    kill = by_name(judge(lines))["kill"]
    assert (kill.overlaps, kill.late_writes) == (0, 1)


def test_recovery_takes_the_hosts_clock_offset_out() -> None:
    lines = clean_runs("j", range(1000, 1010))
    for line in lines:
        if line["scheduled_for"] == 1008:
            line.update(host="ahead", t=line["t"] + 300 + 6)  # finished 6 s late, clock +300 s
    kill = by_name(judge(lines, skews={"ahead": 300.0}))["kill"]
    assert abs(kill.recovery_s - 6.4) < 1e-9
