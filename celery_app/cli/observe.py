"""``kernel status``, ``kernel events`` and ``kernel doctor``: how the kernel is doing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import click

from adapters import load_adapters
from celery_app.cli.output import Env, command, fields, format_age, format_json, iso, line, table
from celery_app.config import KernelSettings, open_kernel
from kernel import Beat, Event, Kernel, KernelError
from kernel.redaction import masked_url

__all__ = ["STALE_BEAT_FACTOR", "beat_health", "doctor", "events", "status"]

#: A Beat that has not ticked for this many of its intervals is considered stopped.
STALE_BEAT_FACTOR = 3
_PAGE = 1000


def beat_health(beats: list[Beat], now: datetime) -> list[dict[str, Any]]:
    """Each Beat's last tick, its age and whether it is stale (> 3× its interval)."""
    rows = []
    for beat in beats:
        age = (now - beat.last_tick_at).total_seconds()
        rows.append(
            {
                "id": beat.id,
                "host": beat.host,
                "interval_s": beat.interval_s,
                "last_tick_at": iso(beat.last_tick_at),
                "age_s": round(age, 3),
                "stale": age > STALE_BEAT_FACTOR * beat.interval_s,
            }
        )
    return rows


def _beat_warning(beats: list[dict[str, Any]]) -> str | None:
    if not beats:
        return "no Beat has ever ticked: start `celery -A celery_app beat`; nothing is scheduled"
    if all(b["stale"] for b in beats):
        return (
            f"no Beat has ticked within {STALE_BEAT_FACTOR}x its interval: is Beat running? "
            "due firings are not created and hints are not re-published"
        )
    return None


@command("status")
@click.option(
    "--fail-on-stale-beat",
    is_flag=True,
    help="Exit 3 when no Beat has ticked within 3x its interval (for health checks).",
)
def status(env: Env, fail_on_stale_beat: bool) -> None:
    """Counts per status, expiring leases, pauses, dead letters, and each Beat's last tick."""
    status = env.kernel.status()
    now = datetime.fromtimestamp(status["now_ms"] / 1000, UTC)
    beats = beat_health(env.kernel.beats(), now)
    counts = status["counts"]
    age_ms = status["oldest_claimable_age_ms"]
    warning = _beat_warning(beats)
    data = {
        "now": iso(now),
        "counts": counts,
        "paused": status["paused"],
        "leases_expiring_10s": status["leases_expiring_10s"],
        "dead_letters": counts["dead_letter"],
        "needs_adjudication": counts["needs_adjudication"],
        "oldest_claimable_age_s": None if age_ms is None else age_ms / 1000,
        "beats": beats,
        "warnings": [warning] if warning else [],
    }

    def render() -> str:
        parts = [
            f"kernel status at {data['now']}",
            table(("status", "count"), counts.items()),
            "",
            fields(
                [
                    ("paused", status["paused"]),
                    ("leases expiring within 10s", status["leases_expiring_10s"]),
                    ("dead letters", counts["dead_letter"]),
                    ("needs adjudication", counts["needs_adjudication"]),
                    (
                        "oldest claimable",
                        "-" if age_ms is None else f"waiting {format_age(age_ms / 1000)}",
                    ),
                ]
            ),
            "",
            table(
                ("beat", "host", "interval", "last tick (UTC)", "age", "state"),
                (
                    (
                        b["id"],
                        b["host"],
                        format_age(b["interval_s"]),
                        b["last_tick_at"],
                        format_age(b["age_s"]),
                        "STALE" if b["stale"] else "ok",
                    )
                    for b in beats
                ),
                empty="(no Beat has ticked)",
            ),
        ]
        if warning:
            parts.append(f"WARNING: {warning}")
        return "\n".join(parts)

    env.emit(data, render)
    if fail_on_stale_beat and warning:
        raise SystemExit(3)


def _stream(
    kernel: Kernel, after: int, job_id: str | None, occurrence_id: int | None, interval: float
) -> Iterator[Event]:
    while True:
        page = kernel.events(
            after_id=after, job_id=job_id, occurrence_id=occurrence_id, limit=_PAGE
        )
        yield from page
        if page:
            after = page[-1].id
        if len(page) < _PAGE:
            time.sleep(interval)


@command("events")
@click.option("--job", "job_id", default=None, metavar="JOB", help="Only this job's events.")
@click.option(
    "--occurrence",
    "occurrence_id",
    type=int,
    default=None,
    metavar="OCC",
    help="Only this occurrence's events.",
)
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=None,
    metavar="ID",
    help="Only events after this id (default: 0; with --follow: the newest).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="At most this many (without --follow).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until interrupted.")
@click.option(
    "--interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
def events(
    env: Env,
    job_id: str | None,
    occurrence_id: int | None,
    after: int | None,
    limit: int,
    follow: bool,
    interval: float,
) -> None:
    """The event log, oldest first; --follow streams new events until interrupted.

    With --json, --follow prints one JSON object per line.
    """
    kernel = env.kernel
    if not follow:
        found = kernel.events(
            after_id=after or 0, job_id=job_id, occurrence_id=occurrence_id, limit=limit
        )
        last = found[-1].id if found else (after or 0)
        env.emit(
            {"events": [e.to_dict() for e in found], "last_id": last},
            lambda: table(
                ("id", "at", "type", "job", "occurrence", "data"),
                ((e.id, iso(e.at), e.type, e.job_id, e.occurrence_id, e.data) for e in found),
                empty="(no events)",
            ),
        )
        return
    start = kernel.last_event_id() if after is None else after
    # On stderr in both modes: it tells people (and scripts waiting for it) where the stream starts.
    click.echo(f"following events after id {start} (Ctrl-C to stop)", err=True)
    try:
        for event in _stream(kernel, start, job_id, occurrence_id, interval):
            d = event.to_dict()
            click.echo(
                format_json(d)
                if env.json
                else line((d["id"], d["at"], d["type"], d["job_id"], d["occurrence_id"], d["data"]))
            )
    except KeyboardInterrupt:
        return


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


def _doctor_checks(app: Any) -> list[dict[str, str]]:
    try:
        settings = KernelSettings.from_app(app)
    except KernelError as exc:
        return [_check("settings", "fail", exc.message)]
    checks = [_check("settings", "ok", f"database {masked_url(settings.database_url)}")]
    if settings.sqlite_synchronous == "NORMAL" and settings.database_url.startswith("sqlite"):
        checks.append(
            _check(
                "durability",
                "warn",
                "SQLite synchronous=NORMAL: a power loss may lose committed claims and settles",
            )
        )
    try:
        adapters = load_adapters(app)
    except Exception as exc:  # a broken plug-in must show up here, not as a traceback
        checks.append(_check("adapters", "fail", f"{type(exc).__name__}: {exc}"))
        adapters = {}
    else:
        checks.append(_check("adapters", "ok", ", ".join(sorted(adapters)) or "none"))
    try:
        kernel = open_kernel(app, migrate=False)
    except KernelError as exc:
        return [*checks, _check("database", "fail", f"{exc.code}: {exc.message}")]
    try:
        checks.append(_check("database", "ok", "reachable, schema up to date"))
        missing = sorted(job.id for job in kernel.list_jobs() if job.kind not in adapters)
        checks.append(
            _check("job kinds", "fail", f"no adapter installed for jobs {missing}")
            if missing
            else _check("job kinds", "ok", "every job's kind has an adapter")
        )
        status = kernel.status()
        now = datetime.fromtimestamp(status["now_ms"] / 1000, UTC)
        warning = _beat_warning(beat_health(kernel.beats(), now))
        checks.append(
            _check("beat", "warn", warning) if warning else _check("beat", "ok", "ticking")
        )
        stuck = status["counts"]["dead_letter"] + status["counts"]["needs_adjudication"]
        checks.append(
            _check(
                "attention",
                "warn",
                f"{stuck} dead letter(s) or adjudication(s) wait for an operator",
            )
            if stuck
            else _check("attention", "ok", "none")
        )
    except KernelError as exc:
        checks.append(_check("database", "fail", f"{exc.code}: {exc.message}"))
    finally:
        kernel.close()
    checks.append(_broker_check(app))
    return checks


def _broker_check(app: Any) -> dict[str, str]:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0.5, timeout=5)
            return _check("broker", "ok", conn.as_uri())
    except Exception as exc:  # any transport's failure is a finding, not a crash
        return _check("broker", "fail", f"{type(exc).__name__}: {exc}")


@command("doctor")
def doctor(env: Env) -> None:
    """Check settings, database schema, adapters, Beat and broker; exit 1 if any check fails."""
    checks = _doctor_checks(env.app)
    ok = all(c["status"] != "fail" for c in checks)
    env.emit(
        {"ok": ok, "checks": checks},
        lambda: table(
            ("check", "status", "detail"),
            ((c["name"], c["status"].upper(), c["detail"]) for c in checks),
        ),
    )
    if not ok:
        raise click.exceptions.Exit(1)
