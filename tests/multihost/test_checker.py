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
    return check(
        lines,
        faults,
        owed,
        skews=kw.get("skews", {}),
        adjudication=kw.get("adj", set()),
        handed_back=kw.get("handed_back", frozenset()),
    )


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


def steps(due: float, fence: int, t: float, done: range, resumed_from: int = 0) -> list[Any]:
    """A checkpointing run's lines: ``start`` (maybe resumed), then a ``step`` per done step."""
    first = run("j", due, fence, "start", t) | (
        {"resumed_from": resumed_from} if resumed_from else {}
    )
    return [
        first,
        *(run("j", due, fence, "step", t + 1 + i) | {"step": s} for i, s in enumerate(done)),
    ]


def test_a_run_resumed_from_its_checkpoint_is_counted_and_no_duplicate() -> None:
    lines = [x for x in clean_runs("j", range(1000, 1010)) if x["scheduled_for"] != 1006]
    lines += steps(1006, 1, 1006.1, range(0, 3))  # paused after step 2: checkpoint {"done": 3}
    lines += [*steps(1006, 2, 1012.0, range(3, 6), resumed_from=3), run("j", 1006, 2, "end", 1016)]
    rows = by_name(judge(lines, "at-most-once", handed_back=frozenset({("j", 1006.0)})))
    kill = rows["kill"]
    assert (kill.resumed, kill.rewinds, kill.duplicates, kill.lost) == (1, 0, 0, 0)
    assert not failed(list(rows.values()))


def test_a_resume_the_ledger_contradicts_is_a_rewind() -> None:
    base = [x for x in clean_runs("j", range(1000, 1010)) if x["scheduled_for"] != 1006]
    went_on = steps(1006, 1, 1006.1, range(0, 4))  # wrote step 3, yet resumed from 3
    resumed = [*steps(1006, 2, 1012.0, range(3, 6), resumed_from=3), run("j", 1006, 2, "end", 1016)]
    assert by_name(judge(base + went_on + resumed))["kill"].rewinds == 1
    never = steps(1006, 1, 1006.1, range(0, 1))  # reached step 0 only: no checkpoint 3 exists
    assert by_name(judge(base + never + resumed))["kill"].rewinds == 1


def test_a_handed_back_firing_that_never_finishes_is_lost() -> None:
    lines = [x for x in clean_runs("j", range(1000, 1010)) if x["scheduled_for"] != 1006]
    lines += steps(1006, 1, 1006.1, range(0, 3))  # paused, never resumed
    rows = by_name(judge(lines, "at-most-once", handed_back=frozenset({("j", 1006.0)})))
    assert rows["kill"].lost == 1
