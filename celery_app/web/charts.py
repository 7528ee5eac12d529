"""The console's charts, drawn on the server as inline SVG (no script, no library).

Each chart is a function from JSON-ready data (what :mod:`celery_app.operations`
answers) to SVG markup; colours come from classes in ``console.css``, and every mark
carries a ``<title>`` (the browser's tooltip) saying what it stands for.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from markupsafe import Markup, escape

from celery_app.operations import format_age

__all__ = ["run_history", "throughput", "timeline"]

_WIDTH = 800
_PAD = 40

#: The timeline's mark for each kind of step.
_STEP_CLASS = {
    "occurrence_created": "made",
    "job_run_now": "made",
    "occurrence_skipped": "bad",
    "occurrence_approved": "made",
    "occurrence_claimed": "run",
    "occurrence_resumed": "run",
    "occurrence_pause_requested": "pause",
    "occurrence_paused": "pause",
    "occurrence_handed_back": "pause",
    "occurrence_cancel_requested": "pause",
    "occurrence_retry_wait": "retry",
    "occurrence_requeued": "retry",
    "occurrence_succeeded": "ok",
    "occurrence_dead_letter": "bad",
    "occurrence_needs_adjudication": "bad",
    "occurrence_cancelled": "bad",
    "occurrence_rejected": "bad",
}
#: Steps that end a run's lease (the bar from its claim stops there).
_RUN_ENDS = {
    "occurrence_paused",
    "occurrence_handed_back",
    "occurrence_retry_wait",
    "occurrence_succeeded",
    "occurrence_dead_letter",
    "occurrence_needs_adjudication",
    "occurrence_cancelled",
}
_STATUS_CLASS = {
    "succeeded": "ok",
    "dead_letter": "bad",
    "needs_adjudication": "bad",
    "cancelled": "bad",
    "skipped": "skip",
    "running": "run",
    "retry_wait": "retry",
}


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _svg(height: int, label: str, parts: Iterable[str]) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {height}" role="img" '
        f'aria-label="{escape(label)}" preserveAspectRatio="none">{"".join(parts)}</svg>'
    )


def _text(x: float, y: float, text: str, anchor: str = "start") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'


def timeline(story: list[dict[str, Any]], now: datetime, settled: bool) -> Markup:
    """One occurrence's steps on a time line: a bar for each run (claim to the step that
    ended it, or to now), a mark for each step."""
    if not story:
        return Markup("")
    start = _at(story[0]["at"])
    end = _at(story[-1]["at"]) if settled else max(now, _at(story[-1]["at"]))
    span = max((end - start).total_seconds(), 1e-3)
    inner = _WIDTH - 2 * _PAD

    def x(at: datetime) -> float:
        return _PAD + (at - start).total_seconds() / span * inner

    parts = [f'<line class="axis" x1="{_PAD}" y1="30" x2="{_WIDTH - _PAD}" y2="30"/>']
    claimed: datetime | None = None
    for step in [*story, None]:
        if step is None or step["type"] in _RUN_ENDS or step["type"] == "occurrence_claimed":
            if claimed is not None:
                until = _at(step["at"]) if step is not None else end
                parts.append(
                    f'<rect class="lease" x="{x(claimed):.1f}" y="22" '
                    f'width="{max(x(until) - x(claimed), 2):.1f}" height="16">'
                    f"<title>run {format_age((until - claimed).total_seconds())}</title></rect>"
                )
                claimed = None
            if step is not None and step["type"] == "occurrence_claimed":
                claimed = _at(step["at"])
    for step in story:
        kind = _STEP_CLASS.get(step["type"], "other")
        parts.append(
            f'<circle class="mark {kind}" cx="{x(_at(step["at"])):.1f}" cy="30" r="6">'
            f"<title>{escape(step['at'][11:19])} {escape(step['text'])}</title></circle>"
        )
    parts.append(_text(_PAD, 58, story[0]["at"][11:19] + " UTC"))
    parts.append(_text(_WIDTH - _PAD, 58, "+" + format_age(span), "end"))
    return _svg(64, "run timeline", parts)


def run_history(runs: list[dict[str, Any]]) -> Markup:
    """A job's latest runs, oldest first: one bar each, as tall as the run took,
    coloured by its outcome; a run with no duration (skipped, waiting) is a stub."""
    if not runs:
        return Markup("")
    height, base = 120, 100
    longest = max((r["duration_s"] or 0 for r in runs), default=0) or 1
    slot = (_WIDTH - 2 * _PAD) / max(len(runs), 1)
    parts = [f'<line class="axis" x1="{_PAD}" y1="{base}" x2="{_WIDTH - _PAD}" y2="{base}"/>']
    for i, run in enumerate(runs):
        took = run["duration_s"]
        tall = max((took or 0) / longest * (base - 10), 3)
        kind = _STATUS_CLASS.get(run["status"], "other")
        said = f"#{run['id']} {run['status']}" + (f", ran {format_age(took)}" if took else "")
        parts.append(
            f'<a href="/occurrences/{run["id"]}"><rect class="bar {kind}" '
            f'x="{_PAD + i * slot + slot * 0.15:.1f}" y="{base - tall:.1f}" '
            f'width="{slot * 0.7:.1f}" height="{tall:.1f}"><title>{escape(said)}</title></rect></a>'
        )
    parts.append(_text(2, 12, format_age(longest)))
    parts.append(_text(_PAD, base + 16, f"#{runs[0]['id']}"))
    parts.append(_text(_WIDTH - _PAD, base + 16, f"#{runs[-1]['id']}", "end"))
    return _svg(height, f"duration and outcome of the last {len(runs)} runs", parts)


def throughput(counted: dict[str, Any]) -> Markup:
    """Runs that succeeded (below) and attempts that failed (stacked above) per interval."""
    buckets = counted["buckets"]
    height, base = 120, 100
    most = max((b["succeeded"] + b["failed"] for b in buckets), default=0) or 1
    slot = (_WIDTH - 2 * _PAD) / len(buckets)
    parts = [f'<line class="axis" x1="{_PAD}" y1="{base}" x2="{_WIDTH - _PAD}" y2="{base}"/>']
    for i, bucket in enumerate(buckets):
        left = _PAD + i * slot + slot * 0.1
        top = base
        for key, kind in (("succeeded", "ok"), ("failed", "bad")):
            tall = bucket[key] / most * (base - 10)
            if tall:
                top -= tall
                said = f"{bucket['at'][11:16]} UTC: {bucket[key]} {key}"
                parts.append(
                    f'<rect class="bar {kind}" x="{left:.1f}" y="{top:.1f}" '
                    f'width="{slot * 0.8:.1f}" height="{tall:.1f}"><title>{said}</title></rect>'
                )
    parts.append(_text(2, 12, str(most)))
    parts.append(_text(_PAD, base + 16, counted["start"][11:16] + " UTC"))
    parts.append(_text(_WIDTH - _PAD, base + 16, "now", "end"))
    label = f"runs per {format_age(counted['bucket_s'])} since {counted['start']}"
    return _svg(height, label, parts)
