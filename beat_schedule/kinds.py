"""Refuse job definitions whose ``kind`` no installed adapter runs.

A typo (``shel``) would otherwise define a job that dead-letters every run with
ADAPTER_UNKNOWN. Kinds installed only on the workers (not where the definition is
applied) are allowed by name: ``KERNEL_WORKER_KINDS`` / ``kernel_worker_kinds``
(comma-separated, or a list) or ``kernel jobs apply --allow-kind``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from kernel import InvalidArgument

__all__ = ["KindCheck", "check_kinds", "kind_check", "worker_only_kinds"]

#: What is wrong with a job's kind (a sentence), or None when it can run.
KindCheck = Callable[[str], "str | None"]


def worker_only_kinds(conf: Any) -> set[str]:
    """The kinds ``KERNEL_WORKER_KINDS`` (else ``kernel_worker_kinds``) allows."""
    value = os.environ.get("KERNEL_WORKER_KINDS") or conf.get("kernel_worker_kinds") or ()
    names = value.split(",") if isinstance(value, str) else value
    return {str(name).strip() for name in names if str(name).strip()}


def kind_check(installed: Iterable[str], allowed: set[str]) -> KindCheck:
    """The check of one kind against the ``installed`` adapters and the ``allowed`` names."""
    names = sorted(installed)
    known = set(names) | allowed

    def problem(kind: str) -> str | None:
        if kind in known:
            return None
        return (
            f"no adapter of kind {kind!r} is installed; installed kinds: {', '.join(names)}. "
            "If it is installed only on the workers, allow it with KERNEL_WORKER_KINDS or "
            "--allow-kind"
        )

    return problem


def check_kinds(
    kinds: Iterable[tuple[str, str]],
    installed: Iterable[str],
    allowed: set[str],
    *,
    file: str | None = None,
) -> None:
    """Refuse the first ``(job id, kind)`` whose kind is neither installed nor allowed.

    ``file`` names the job file the definitions came from (in the error's details).

    Raises:
        InvalidArgument: ``field`` names the job's kind; the message lists the
            installed kinds and how to allow one installed only on workers.
    """
    check = kind_check(installed, allowed)
    for job_id, kind in kinds:
        problem = check(kind)
        if problem is not None:
            raise InvalidArgument(
                f"jobs[{job_id!r}].kind",
                problem,
                kind=kind,
                **({"file": file} if file is not None else {}),
            )
