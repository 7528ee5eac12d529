"""A week of Beats in minutes: several Beats firing every schedule kind on one PostgreSQL.

``.venv/bin/python bench/soak.py --days 7 --beats 3`` starts a throw-away PostgreSQL
(``tests/servers.py``) and drives the kernel's clock seam (``Kernel.open(clock=...)``)
through simulated days: each Beat is Beat's own firing step (``FiringSteps._materialise``,
what ``celery beat`` runs every tick) on a kernel connection of its own, and at each
instant the harness moves to, the Beats run it at the same moment in threads, so their
cursor compare-and-sets really race. A worker then claims and settles every claimable
occurrence, writing a ledger line for each run. The jobs cover every schedule kind
(cron in UTC, Europe/London, Europe/Berlin and Australia/Sydney, every, at, in); the
default week holds the European spring-forward gap and the Sydney fall-back fold. On
the way, one Beat after another is restarted, one job is edited live (a new cron and
zone), and all Beats are down together for two hours (catch-up ``latest`` and ``all``).

The firings each job owes are computed here from the schedules, independently of the
kernel's own schedule code (wall times by ``zoneinfo``: a repeated wall time fires once,
first; a missing one once, at the end of the gap), and the chaos checker
(``tests/multihost/checker.py``) judges the ledger and the kernel's rows and events
against them. Exit status 0 clean, 1 on any violation; the table is printed last.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from multihost.checker import check  # noqa: E402
from multihost.evidence import Evidence, Expectation, FaultRecord, read_kernel  # noqa: E402
from multihost.report import failed, report  # noqa: E402
from servers import start_postgres  # noqa: E402

from celery_app.beat.firings import FiringSteps  # noqa: E402
from kernel import Kernel  # noqa: E402
from kernel.testing import ManualClock  # noqa: E402

QUEUE = "soak"
#: Spring forward in Europe (29 March, 01:00 UTC) and fall back in Sydney (5 April,
#: 03:00 local = 4 April 16:00 UTC) both fall inside the 7 days from here.
DEFAULT_START = datetime(2026, 3, 28, 20, 0, 17, tzinfo=UTC)
OUTAGE = timedelta(hours=2)
#: Beats also tick this often between due times, as a real Beat does every second.
IDLE_TICK = timedelta(minutes=10)


# -- the jobs and what they owe ------------------------------------------------------------


def _field(text: str, top: int) -> set[int]:
    """One cron field of the forms the soak uses: ``*``, ``*/n``, ``n`` or ``a,b``."""
    if text == "*":
        return set(range(top))
    if text.startswith("*/"):
        return set(range(0, top, int(text[2:])))
    return {int(part) for part in text.split(",")}


def cron_dues(expr: str, zone: str, after: datetime, until: datetime) -> list[datetime]:
    """Instants of a minute/hour cron (other fields ``*``) in ``zone``, in (after, until].

    A wall time a spring-forward skips fires at the gap's end for a fixed hour (the job's
    ``dst.gap``, ``shift_forward``), and not at all for a wildcard hour, as under cron and
    Celery: the next hour's own firing stands for it."""
    minute, hour, *rest = expr.split()
    assert rest == ["*", "*", "*"], "the soak's crons vary minute and hour only"
    tz = ZoneInfo(zone)
    dues: set[datetime] = set()
    day = after.astimezone(tz).date() - timedelta(days=1)
    while day <= until.astimezone(tz).date() + timedelta(days=1):
        for h in sorted(_field(hour, 24)):
            for m in sorted(_field(minute, 60)):
                wall = datetime(day.year, day.month, day.day, h, m)
                if hour != "*" or _exists(wall, tz):
                    dues.add(_instant(wall, tz))
        day += timedelta(days=1)
    return sorted(d for d in dues if after < d <= until)


def _exists(wall: datetime, tz: ZoneInfo) -> bool:
    """Whether ``wall`` is a time the zone's clocks show (not inside a spring-forward gap)."""
    first = wall.replace(tzinfo=tz, fold=0)
    return first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant a wall time fires: its first occurrence, or the end of the gap it is in."""
    while not _exists(wall, tz):
        wall += timedelta(minutes=1)  # a wall time the gap skips: the next that exists
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


def every_dues(seconds: int, after: datetime, until: datetime) -> list[datetime]:
    """Whole multiples of ``seconds`` since the epoch in (after, until]."""
    first = int(after.timestamp()) // seconds * seconds + seconds
    return [
        datetime.fromtimestamp(t, tz=UTC) for t in range(first, int(until.timestamp()) + 1, seconds)
    ]


@dataclass
class SoakJob:
    """A job's definition and the firings it owes between the soak's start and end."""

    spec: dict[str, Any]
    dues: Callable[[datetime, datetime], list[datetime]]


def _job(job_id: str, schedule: dict[str, Any], catchup: str = "latest") -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "callable",
        "queue": QUEUE,
        "schedule": schedule,
        "payload": {"callable": "soak:unused"},
        "overlap": "allow",
        # A window only where it has an effect: the kernel refuses one under "latest".
        "catchup": {"policy": catchup, **({"window": "1d"} if catchup == "all" else {})},
        "delivery": "at-least-once",
    }


def _cron(job_id: str, expr: str, zone: str, catchup: str = "latest") -> SoakJob:
    return SoakJob(
        _job(job_id, {"cron": expr, "timezone": zone}, catchup),
        lambda a, b: cron_dues(expr, zone, a, b),
    )


def soak_jobs(start: datetime) -> list[SoakJob]:
    at = start + timedelta(days=2, hours=3, minutes=33)
    return [
        _cron("cron-utc-hourly", "0 * * * *", "UTC", catchup="all"),
        _cron("cron-london-half", "30 * * * *", "Europe/London"),
        _cron("cron-berlin-quarter", "*/15 * * * *", "Europe/Berlin", catchup="all"),
        _cron("cron-berlin-0230", "30 2 * * *", "Europe/Berlin"),
        _cron("cron-sydney-0230", "30 2 * * *", "Australia/Sydney"),
        SoakJob(_job("every-7m", {"every": "7m"}, "all"), lambda a, b: every_dues(420, a, b)),
        SoakJob(_job("at-once", {"at": at.isoformat()}), lambda a, b: [at] if a < at <= b else []),
        SoakJob(
            _job("in-3d", {"in": "3d"}),
            lambda a, b: [a + timedelta(days=3)] if a + timedelta(days=3) <= b else [],
        ),
    ]


#: The job edited live: from every two hours in UTC to 20 past every three hours in New York.
EDITED = ("edited", ("0 */2 * * *", "UTC"), ("20 */3 * * *", "America/New_York"))


# -- the Beats and the worker --------------------------------------------------------------


class SimBeat(FiringSteps):
    """One Beat's firing step on a kernel connection of its own; restartable."""

    def __init__(self, name: str, url: str, clock: ManualClock) -> None:
        self.beat_id = name
        self.url = url
        self.clock = clock
        self.kernel = Kernel.open(url, clock=clock)

    def tick(self, together: threading.Barrier) -> None:
        """Fire what is due, starting when every Beat of ``together`` is ready."""
        together.wait()
        self._materialise(self.kernel)

    def restart(self) -> None:
        self.kernel.close()
        self.kernel = Kernel.open(self.url, clock=self.clock)


def drain(kernel: Kernel, clock: ManualClock, ledger: list[dict[str, Any]]) -> int:
    """Claim and settle every claimable occurrence now, writing each run to ``ledger``."""
    ran = 0
    while (claim := kernel.claim_next(owner="soak-worker:1", queues=[QUEUE])) is not None:
        occurrence = claim.occurrence
        line = {
            "job_id": occurrence.job_id,
            "occurrence_id": occurrence.id,
            "scheduled_for": occurrence.scheduled_for.timestamp(),
            "fence": claim.fence,
            "host": "worker",
            "t": clock.ms / 1000,
        }
        ledger += [line | {"event": "start"}, line | {"event": "end"}]
        kernel.succeed(occurrence.id, owner=claim.owner, fence=claim.fence)
        ran += 1
    return ran


def dst_transitions(start: datetime, end: datetime) -> list[FaultRecord]:
    """Each DST change of the soak's zones in (start, end], found hour by hour."""
    found = []
    for zone in ("Europe/London", "Europe/Berlin", "Australia/Sydney", "America/New_York"):
        tz = ZoneInfo(zone)
        t = start
        while t < end:
            before, after = t.astimezone(tz).utcoffset(), (t + timedelta(hours=1)).astimezone(tz)
            if after.utcoffset() != before:
                city = zone.split("/")[1].lower()
                kind = "gap" if after.utcoffset() > before else "fold"  # type: ignore[operator]
                at = t + timedelta(hours=1)
                found.append(FaultRecord(f"dst_{city}_{kind}", at.timestamp(), f"{zone} {kind}"))
            t += timedelta(hours=1)
    return found


def soak(url: str, start: datetime, days: float, beats: int, seed: int) -> list[Any]:
    rng = random.Random(seed)
    end = start + timedelta(days=days)
    clock = ManualClock(start)
    jobs = soak_jobs(start)
    job_id, (old_expr, old_zone), (new_expr, new_zone) = EDITED
    edit_at = start + timedelta(days=days * 3 / 7, minutes=7, seconds=13)
    edited = _job(job_id, {"cron": old_expr, "timezone": old_zone})
    worker = Kernel.open(url, migrate_schema=True, clock=clock)
    worker.apply_jobs([j.spec for j in jobs] + [edited])
    fleet = [SimBeat(f"beat-{i + 1}", url, clock) for i in range(beats)]

    down_at = start + timedelta(days=days * 5 / 7, minutes=3)
    restarts = [start + timedelta(days=days * (i + 0.5) / 7) for i in range(7)]
    faults = dst_transitions(start, end)
    owed = {j.spec["id"]: set(j.dues(start, end)) for j in jobs}
    owed[job_id] = set(cron_dues(old_expr, old_zone, start, edit_at))
    owed[job_id] |= set(cron_dues(new_expr, new_zone, edit_at, end))
    instants = sorted(
        {d for dues in owed.values() for d in dues}
        | {start + IDLE_TICK * i for i in range(int((end - start) / IDLE_TICK) + 1)}
        | {edit_at, down_at, down_at + OUTAGE, *restarts}
    )
    ledger: list[dict[str, Any]] = []
    pool = ThreadPoolExecutor(max_workers=beats)
    began = time.monotonic()
    try:
        for i, instant in enumerate(instants):
            if instant > end:
                break
            gap = (instants[i + 1] - instant).total_seconds() if i + 1 < len(instants) else 0
            clock.set(instant + timedelta(seconds=rng.uniform(0, min(20.0, gap / 2))))
            if instant == edit_at:
                worker.apply_job(edited | {"schedule": {"cron": new_expr, "timezone": new_zone}})
                faults.append(
                    FaultRecord(
                        "live_edit", clock.now.timestamp(), f"{job_id}: {new_expr} {new_zone}"
                    )
                )
            if instant in restarts:
                beat = fleet[restarts.index(instant) % beats]
                beat.restart()
                faults.append(
                    FaultRecord("beat_restart", clock.now.timestamp(), f"{beat.beat_id} restarted")
                )
            if instant == down_at:
                faults.append(
                    FaultRecord(
                        "beats_down", clock.now.timestamp(), f"all {beats} Beats down {OUTAGE}"
                    )
                )
            if down_at <= instant < down_at + OUTAGE:
                continue
            together = threading.Barrier(beats)
            for done in [pool.submit(beat.tick, together) for beat in fleet]:
                done.result()
            drain(worker, clock, ledger)
        elapsed = time.monotonic() - began
        rows, events = read_kernel(worker, list(owed))
    finally:
        pool.shutdown()
        for beat in fleet:
            beat.kernel.close()
        worker.close()
    expectations = [
        Expectation(job, "at-least-once", tuple(sorted(d.timestamp() for d in dues)))
        for job, dues in owed.items()
    ]
    evidence = Evidence(ledger, rows, events, faults, expectations, judged_at=end.timestamp())
    print(
        f"{days:g} simulated days from {start.isoformat()}, {beats} Beats,"
        f" {len(instants)} instants, {len(rows)} occurrences, {elapsed:.0f} s wall"
    )
    return check(evidence)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=7.0, help="simulated days")
    parser.add_argument("--beats", type=int, default=3, help="Beats firing at once")
    parser.add_argument("--start", default=DEFAULT_START.isoformat(), help="simulated start (UTC)")
    parser.add_argument("--seed", type=int, default=1, help="seeds the ticks' jitter")
    parser.add_argument("--verbose", action="store_true", help="print every note")
    parser.add_argument(
        "--database-url", help="an empty PostgreSQL database to use (default: start a server)"
    )
    args = parser.parse_args(argv)
    start = datetime.fromisoformat(args.start)
    if args.database_url:
        rows = soak(args.database_url, start, args.days, args.beats, args.seed)
    else:
        server = start_postgres()
        try:
            rows = soak(server.url, start, args.days, args.beats, args.seed)
        finally:
            server.stop()
    bad = failed(rows)
    print("FAILED: see the violations below" if bad else "no violation")
    print(report(rows, verbose=args.verbose))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
