"""Operator actions on one occurrence: pause, resume, requeue, adjudicate, cancel.

Each takes ``--request-id`` (generated and printed when absent) so a script can
retry it safely — the kernel answers a faithful replay ``deduplicated`` and refuses
a replay with changed evidence — and ``--operator`` (default: the OS user), which
the kernel records. Evidence the kernel checks (the fence, the error code) defaults
to what the occurrence shows now; pass it explicitly to act only if nothing changed
since you looked.
"""

from __future__ import annotations

import functools
import getpass
import os
import uuid
from collections.abc import Callable
from typing import Any

import click

from adapters import load_adapters
from celery_app.cli.output import Env, command, fields
from kernel import ActionResult, Decision, KernelError
from kernel.durations import text

__all__ = [
    "action_options",
    "adjudicate",
    "cancel",
    "default_operator",
    "pause",
    "requeue",
    "resume",
    "run_action",
]

_IDENT = text(128)


def default_operator() -> str:
    """The OS user running the CLI (a uid when the system has no name for it)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid:{os.getuid()}"


def action_options(body: Callable[..., None]) -> Callable[..., None]:
    """Add ``--request-id`` and ``--operator`` to an operator action."""
    body = click.option(
        "--operator",
        default=None,
        metavar="NAME",
        help="Who acts; recorded with the request (default: the OS user).",
    )(body)
    return click.option(
        "--request-id",
        default=None,
        metavar="ID",
        help="Idempotency key; a retry with the same id is answered, not redone "
        "(default: a new id, printed).",
    )(body)


def run_action(
    env: Env, request_id: str | None, operator: str | None, act: Callable[[str, str], ActionResult]
) -> None:
    """Run ``act(request_id, operator)`` and print the result with the request id used.

    A refusal carries the request id too, so an uncertain outcome can be retried.
    """
    rid = _IDENT(request_id if request_id is not None else uuid.uuid4().hex, "request_id")
    who = _IDENT(operator if operator is not None else default_operator(), "operator")
    try:
        result = act(rid, who)
    except KernelError as exc:
        exc.details.setdefault("request_id", rid)
        raise
    occ = result.occurrence
    data = {
        "request_id": result.request_id,
        "deduplicated": result.deduplicated,
        "operator": who,
        "occurrence": occ.to_dict(),
    }

    def render() -> str:
        control = occ.control.state.value if occ.control else None
        replay = (
            " (deduplicated: this request id was already applied)" if result.deduplicated else ""
        )
        return fields(
            [
                ("request id", f"{result.request_id}{replay}"),
                ("occurrence", occ.id),
                ("job", occ.job_id),
                ("status", occ.status.value),
                ("control", control),
                ("fence", occ.fence),
                ("cancel requested", occ.cancel_requested),
            ]
        )

    env.emit(data, render)


def _occurrence_action(body: Callable[..., ActionResult]) -> Callable[..., None]:
    """Wrap ``body(env, occ, rid, who, **opts)`` as ``OCC --request-id --operator``."""

    @functools.wraps(body)
    def run(
        env: Env, occurrence: int, request_id: str | None, operator: str | None, **opts: Any
    ) -> None:
        run_action(
            env, request_id, operator, lambda rid, who: body(env, occurrence, rid, who, **opts)
        )

    return click.argument("occurrence", type=int)(action_options(run))


@command("pause")
@_occurrence_action
@click.option(
    "--fence",
    type=int,
    default=None,
    help="Pause only the run under this fence (default: whichever run holds it now).",
)
def pause(env: Env, occ_id: int, rid: str, who: str, fence: int | None) -> ActionResult:
    """Ask a running occurrence to pause at its next safe point."""
    occ = env.kernel.get_occurrence(occ_id)
    adapter = load_adapters(env.app).get(occ.kind)
    safe_points = adapter.runtime_control.safe_points if adapter is not None else ()
    return env.kernel.request_pause(
        occ_id,
        expected_fence=fence,
        request_id=rid,
        safe_points=safe_points,
        operator=who,
    )


@command("resume")
@_occurrence_action
@click.option(
    "--revision",
    type=int,
    default=None,
    help="Resume only if the control is still at this revision.",
)
def resume(env: Env, occ_id: int, rid: str, who: str, revision: int | None) -> ActionResult:
    """Make a paused occurrence claimable; it resumes from its checkpoint."""
    return env.kernel.resume(occ_id, request_id=rid, operator=who, expected_revision=revision)


@command("requeue")
@_occurrence_action
@click.option("--fence", type=int, default=None, help="Expected fence (default: not checked).")
@click.option("--error-code", default=None, help="Expected last error code (default: not checked).")
def requeue(
    env: Env, occ_id: int, rid: str, who: str, fence: int | None, error_code: str | None
) -> ActionResult:
    """Give a dead letter one more run, consuming no attempt."""
    # Only what the user gave is evidence (SPEC I7): a replay of this request after
    # the state moved on is then answered with the first result, not refused.
    return env.kernel.requeue(
        occ_id, expected_fence=fence, expected_error_code=error_code, request_id=rid, operator=who
    )


@command("adjudicate")
@_occurrence_action
@click.option(
    "--decision",
    required=True,
    type=click.Choice([d.value for d in Decision]),
    help="applied: it happened (succeeded); not_applied: run it again; abandon: dead letter.",
)
def adjudicate(env: Env, occ_id: int, rid: str, who: str, decision: str) -> ActionResult:
    """Decide an at-most-once occurrence whose outcome is unknown."""
    return env.kernel.adjudicate(occ_id, decision=decision, request_id=rid, operator=who)


@command("cancel")
@_occurrence_action
def cancel(env: Env, occ_id: int, rid: str, who: str) -> ActionResult:
    """Cancel a waiting occurrence, or ask a running one to stop."""
    return env.kernel.cancel(occ_id, request_id=rid, operator=who)
