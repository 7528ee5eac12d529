"""A job's definition as people read it: YAML, its revision history (from the
``job_defined``/``job_revised`` events, which carry each definition with secrets masked)
and the difference between two revisions."""

from __future__ import annotations

import difflib
from typing import Any

from beat_schedule import yaml_dialect
from celery_app.operations.times import iso
from kernel import EventType, Job, Kernel, redacted_spec

__all__ = ["job_revisions", "revision_diff", "spec_yaml"]

#: The fields a reader looks for first; the rest follow in name order.
_FIRST = ("id", "kind", "enabled", "schedule", "payload")
_PAGE = 200


def spec_yaml(spec: dict[str, Any]) -> str:
    """A job definition as YAML (a job file's entry), its main fields first."""
    ordered = {k: spec[k] for k in _FIRST if k in spec}
    ordered.update((k, spec[k]) for k in sorted(spec) if k not in ordered)
    return yaml_dialect.dump(ordered)


def job_revisions(kernel: Kernel, job_id: str) -> list[dict[str, Any]]:
    """The job's revisions, newest first: ``revision``, ``at``, ``operator``, ``digest``
    and ``spec`` (None for a revision made before definitions were recorded in events,
    except the current one). Only the job's present life counts: a job deleted and
    defined again starts over at revision 1.

    Raises:
        NotFound: no such job.
    """
    job = kernel.get_job(job_id)
    found: list[dict[str, Any]] = []
    before = 2**63 - 1
    types = (EventType.JOB_DEFINED, EventType.JOB_REVISED)
    while True:
        page = kernel.events(job_id=job_id, types=types, before_id=before, limit=_PAGE)
        for event in reversed(page):
            found.append(
                {
                    "revision": event.data.get("revision"),
                    "at": iso(event.at),
                    "operator": event.data.get("operator"),
                    "digest": event.data.get("digest"),
                    "spec": event.data.get("spec"),
                }
            )
            if event.type == EventType.JOB_DEFINED:
                return _with_current(found, job)
        if len(page) < _PAGE:
            return _with_current(found, job)
        before = page[0].id


def _with_current(found: list[dict[str, Any]], job: Job) -> list[dict[str, Any]]:
    """``found`` with the job's current definition filled in (or added, when its
    event is gone)."""
    current = next((r for r in found if r["revision"] == job.revision), None)
    if current is None:
        current = {"revision": job.revision, "at": iso(job.updated_at), "operator": None,
                   "digest": job.digest, "spec": None}  # fmt: skip
        found.insert(0, current)
    if current["spec"] is None:
        current["spec"] = redacted_spec(job.spec)
    return found


def revision_diff(revisions: list[dict[str, Any]], old: int, new: int) -> list[str] | None:
    """The unified diff of revision ``old``'s YAML against ``new``'s; None when either
    is unknown or was not recorded."""
    specs = {r["revision"]: r["spec"] for r in revisions}
    if specs.get(old) is None or specs.get(new) is None:
        return None
    return list(
        difflib.unified_diff(
            spec_yaml(specs[old]).splitlines(),
            spec_yaml(specs[new]).splitlines(),
            f"revision {old}",
            f"revision {new}",
            lineterm="",
        )
    )
