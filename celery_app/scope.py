"""What this deployment lets a job run: adapter kinds, callable functions, and for how long.

A console admin who may define jobs can run code on every worker (a shell command, any
importable function). ``kernel_allowed_kinds`` and ``kernel_allowed_callables`` (glob
patterns, :class:`~celery_app.settings.KernelSettings`) narrow that. They are checked
when a definition is applied (the CLI, the web console, Beat's job file) and again by
the worker before it runs an occurrence, with the worker's own settings, so a
definition stored earlier or applied elsewhere is refused too.
``kernel_default_timeout`` bounds the runs of jobs that set no ``timeout`` of their own;
the worker applies its own setting, so it also covers jobs defined before it was set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from celery_app.settings import KernelSettings
from kernel import InvalidArgument, JobSpec

__all__ = ["Scope", "UNSCOPED", "NOT_ALLOWED"]

#: The error code of a run its worker's scope refuses (not retried).
NOT_ALLOWED = "NOT_ALLOWED"


@dataclass(frozen=True)
class Scope:
    """Glob patterns of the allowed kinds and callables (None allows any), and the
    timeout of a run whose job sets none (None: unbounded)."""

    kinds: tuple[str, ...] | None = None
    callables: tuple[str, ...] | None = None
    default_timeout_s: float | None = None

    @classmethod
    def of(cls, settings: KernelSettings) -> Scope:
        return cls(settings.allowed_kinds, settings.allowed_callables, settings.default_timeout)

    def timeout_of(self, definition: Mapping[str, Any]) -> tuple[float | None, str]:
        """A run's timeout in seconds (None: unbounded) and where it comes from: the job's
        ``timeout``, else ``kernel_default_timeout``."""
        own = definition.get("timeout")
        if own is not None or self.default_timeout_s is None:
            return own, "timeout"
        return self.default_timeout_s, "kernel_default_timeout"

    def refusal(self, kind: str, payload: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(field, why)`` when a job of ``kind`` with ``payload`` may not run here, else None."""
        if self.kinds is None and self.callables is None:
            return None  # nothing narrowed (the default): asked before every run
        for run in _what_runs(kind, payload):
            if self.kinds is not None and not _matches(run.kind, self.kinds):
                return run.at, (
                    f"kind {run.kind!r} is not allowed in this deployment "
                    f"(KERNEL_ALLOWED_KINDS / kernel_allowed_kinds: {', '.join(self.kinds)})"
                )
            function, allowed = run.function, self.callables
            if function is not None and allowed is not None and not _matches(function, allowed):
                return f"{run.payload_at}.callable", (
                    f"{function!r} is not an allowed callable in this deployment "
                    f"(KERNEL_ALLOWED_CALLABLES / kernel_allowed_callables: {', '.join(allowed)})"
                )
        return None

    def check(self, specs: Iterable[JobSpec]) -> None:
        """Refuse the first definition this scope does not allow.

        Raises:
            InvalidArgument: ``field`` names the job and its refused field.
        """
        for spec in specs:
            refused = self.refusal(spec.kind, spec.payload)
            if refused is not None:
                field, why = refused
                raise InvalidArgument(f"jobs[{spec.id!r}].{field}", why)


#: A scope that allows every kind and callable (no setting given).
UNSCOPED = Scope()


@dataclass(frozen=True)
class _Run:
    """Something a job runs: its ``kind`` (refused at field ``at``) and, for a function,
    which (under ``payload_at``)."""

    at: str
    payload_at: str
    kind: str
    function: str | None


def _what_runs(kind: str, payload: Mapping[str, Any]) -> list[_Run]:
    """The job itself and a watchdog's check (a command runs as ``shell``, a function as
    ``callable``)."""
    function = payload.get("callable") if kind == "callable" else None
    runs = [_Run("kind", "payload", kind, None if function is None else str(function))]
    check = payload.get("check") if kind == "watchdog" else None
    if isinstance(check, Mapping):
        target = check.get("callable")
        runs.append(
            _Run(
                "payload.check",
                "payload.check",
                "shell" if target is None else "callable",
                None if target is None else str(target),
            )
        )
    return runs


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)
