"""Applying job definitions: what ``kernel jobs apply`` and the web's ``apply`` share.

Both check kinds against the installed adapters and the deployment's scope
(:mod:`celery_app.scope`), support a dry run, and answer
``{"dry_run", "jobs": [{"id", "change", "revision"}]}`` (the CLI adds ``file``).
With an expected revision a single definition is revised by compare-and-set on its
revision: stale is REVISION_CONFLICT, so two editors never overwrite each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters import load_adapters
from beat_schedule.jobfiles import JobFile, read_job_file
from beat_schedule.kinds import check_kinds, kind_check, worker_only_kinds
from celery_app.scope import Scope
from celery_app.settings import KernelSettings
from kernel import (
    MASK,
    Budget,
    InvalidArgument,
    JobSpec,
    Kernel,
    NotFound,
    is_sensitive_name,
    validate_job_spec,
)

__all__ = ["apply_specs", "read_app_job_file", "web_spec"]


def read_app_job_file(app: Any, path: str | Path, allow_kinds: Iterable[str] = ()) -> JobFile:
    """Read a job file for ``app``: every problem of every job at once, including kinds
    no adapter of ``app`` runs (``kernel jobs apply`` and Beat's ``KERNEL_JOBS_FILE``).

    Raises:
        JobFileInvalid: as :func:`beat_schedule.jobfiles.read_job_file`.
    """
    allowed = worker_only_kinds(app.conf) | set(allow_kinds)
    return read_job_file(path, check_kind=kind_check(load_adapters(app), allowed))


def apply_specs(
    kernel: Kernel,
    app: Any,
    specs: Sequence[JobSpec],
    *,
    dry_run: bool = False,
    expected_revision: int | None = None,
    allow_kinds: Iterable[str] = (),
    file: str | None = None,
    operator: str | None = None,
    pools: Mapping[str, int] | None = None,
    shared_budgets: Mapping[str, Mapping[str, Any] | Budget] | None = None,
) -> dict[str, Any]:
    """Create, update or leave each job (all in one transaction, or none, with the
    job file's ``pools`` limits and ``shared_budgets``), recording ``operator`` as who
    changed it.

    With ``expected_revision`` exactly one spec is allowed and the job must exist at
    that revision (RevisionConflict otherwise, NotFound when it does not exist).
    """
    if expected_revision is not None and len(specs) != 1:
        raise InvalidArgument(
            "expected_revision", f"applies to one job definition, not {len(specs)}"
        )
    check_kinds(
        [(spec.id, spec.kind) for spec in specs],
        load_adapters(app),
        worker_only_kinds(app.conf) | set(allow_kinds),
        file=file,
    )
    Scope.of(KernelSettings.from_app(app)).check(specs)
    if dry_run:
        results = [_would_change(kernel, spec, expected_revision) for spec in specs]
    elif expected_revision is not None:
        job, changed = kernel.revise_job(
            specs[0].to_dict(), expected_revision=expected_revision, operator=operator
        )
        results = [
            {
                "id": job.id,
                "change": "updated" if changed else "unchanged",
                "revision": job.revision,
            }
        ]
    else:
        applied = kernel.apply_jobs(
            [spec.to_dict() for spec in specs],
            operator=operator,
            pools=pools,
            shared_budgets=shared_budgets,
        )
        results = [
            {"id": job.id, "change": change, "revision": job.revision} for job, change in applied
        ]
    return {"dry_run": dry_run, "jobs": results}


def _would_change(kernel: Kernel, spec: JobSpec, expected_revision: int | None) -> dict[str, Any]:
    """What applying ``spec`` would do, from the job as it is now (nothing is written)."""
    try:
        current = kernel.get_job(spec.id)
    except NotFound:
        if expected_revision is not None:
            raise
        return {"id": spec.id, "change": "created", "revision": None}
    if expected_revision is not None:
        current.check_revision(expected_revision)
    change = "unchanged" if current.digest == spec.digest else "updated"
    return {"id": spec.id, "change": change, "revision": None}


def web_spec(raw: Mapping[str, Any], job_id: str) -> JobSpec:
    """A definition sent to ``/jobs/{job_id}/apply``, validated.

    Its ``id`` may be left out (the path names the job) but not differ. A value the
    console and API show masked (``***``) is refused rather than stored: the
    definition was copied from a masked view and would overwrite the real value.
    """
    spec = {"id": job_id, **raw}
    if spec["id"] != job_id:
        raise InvalidArgument("spec.id", f"is {spec['id']!r} but the path names job {job_id!r}")
    masked = _masked_fields(spec.get("payload"))
    if masked:
        raise InvalidArgument(
            f"payload.{masked[0]}",
            f"holds {MASK}, the mask shown in place of a stored secret; give the real "
            "value, or better refer to the secret by name (payload.secrets / secret_headers)",
        )
    return validate_job_spec(spec)


def _masked_fields(payload: object) -> list[str]:
    """The places in ``payload`` that hold a mask where a secret is shown masked."""
    if not isinstance(payload, Mapping):
        return []
    found: list[str] = []
    env = payload.get("env")
    if isinstance(env, Mapping):
        found += [f"env.{name}" for name, value in env.items() if value == MASK]
    headers = payload.get("headers")
    if isinstance(headers, Mapping):
        found += [
            f"headers.{name}"
            for name, value in headers.items()
            if value == MASK and is_sensitive_name(str(name))
        ]
    url = payload.get("url")
    if isinstance(url, str) and (f":{MASK}@" in url or f"={MASK}" in url):
        found.append("url")
    return found
