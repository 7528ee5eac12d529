"""Operator actions on one occurrence: pause, resume, requeue, adjudicate, cancel,
approve, reject.

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
from collections.abc import Callable
from typing import Any

import click

from celery_app import operations
from celery_app.cli.output import Env, command, fields
from celery_app.operations import Action
from kernel import Decision

__all__ = [
    "action_options",
    "adjudicate",
    "approve",
    "cancel",
    "default_operator",
    "pause",
    "reject",
    "requeue",
    "resume",
    "run_action",
]


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


def run_action(env: Env, request_id: str | None, operator: str | None, action: Action) -> None:
    """Run an operator action and print the result with the request id used."""
    data = operations.act(
        env.app,
        request_id if request_id is not None else operations.new_request_id(),
        operator if operator is not None else default_operator(),
        action,
    )
    # What the occurrence now waits for, so an action that leaves it waiting says why
    # (a forced run-now behind an unresolved run); None when it runs or settled.
    blocker = env.kernel.blocker(data["occurrence"]["id"])
    data["blocker"] = None if blocker is None else blocker.to_dict()

    def render() -> str:
        occ = data["occurrence"]
        replay = (
            " (deduplicated: this request id was already applied)" if data["deduplicated"] else ""
        )
        return fields(
            [
                ("request id", f"{data['request_id']}{replay}"),
                ("occurrence", occ["id"]),
                ("job", occ["job_id"]),
                ("status", occ["status"]),
                ("control", (occ["control"] or {}).get("state")),
                ("fence", occ["fence"]),
                ("cancel requested", occ["cancel_requested"]),
                ("waiting for", blocker.text if blocker and blocker.kind != "none" else None),
                ("note", data.get("note")),
            ],
            full_last=True,
        )

    env.emit(data, render)


def _occurrence_action(body: Callable[..., Action]) -> Callable[..., None]:
    """Wrap ``body(env, occ, **opts)`` (which names the action) as ``OCC --request-id
    --operator``."""

    @functools.wraps(body)
    def run(
        env: Env, occurrence: int, request_id: str | None, operator: str | None, **opts: Any
    ) -> None:
        run_action(env, request_id, operator, body(env, occurrence, **opts))

    return click.argument("occurrence", type=int)(action_options(run))


@command("pause")
@_occurrence_action
@click.option(
    "--fence",
    type=int,
    default=None,
    help="Pause only the run under this fence (default: whichever run holds it now).",
)
def pause(env: Env, occurrence_id: int, fence: int | None) -> Action:
    """Ask a running occurrence to pause at its next safe point."""
    return operations.pause(env.kernel, env.app, occurrence_id, fence)


@command("resume")
@_occurrence_action
@click.option(
    "--revision",
    type=int,
    default=None,
    help="Resume only if the control is still at this revision.",
)
def resume(env: Env, occurrence_id: int, revision: int | None) -> Action:
    """Make a paused occurrence claimable; it resumes from its checkpoint."""
    return operations.resume(env.kernel, occurrence_id, revision)


@command("requeue")
@_occurrence_action
@click.option("--fence", type=int, default=None, help="Expected fence (default: not checked).")
@click.option("--error-code", default=None, help="Expected last error code (default: not checked).")
def requeue(env: Env, occurrence_id: int, fence: int | None, error_code: str | None) -> Action:
    """Give a dead letter one more run, consuming no attempt."""
    return operations.requeue(env.kernel, occurrence_id, fence, error_code)


@command("adjudicate")
@_occurrence_action
@click.option(
    "--decision",
    required=True,
    type=click.Choice([d.value for d in Decision]),
    help="applied: it happened (succeeded); not_applied: run it again; abandon: dead letter.",
)
def adjudicate(env: Env, occurrence_id: int, decision: str) -> Action:
    """Decide an at-most-once occurrence whose outcome is unknown."""
    return operations.adjudicate(env.kernel, occurrence_id, decision)


@command("cancel")
@_occurrence_action
def cancel(env: Env, occurrence_id: int) -> Action:
    """Cancel a waiting occurrence, or ask a running one to stop."""
    return operations.cancel(env.kernel, occurrence_id)


_REASON = click.option(
    "--reason", default=None, metavar="TEXT", help="Why; recorded in the event (optional)."
)


@command("approve")
@_occurrence_action
@_REASON
def approve(env: Env, occurrence_id: int, reason: str | None) -> Action:
    """Let an occurrence awaiting approval run: it is queued and a worker takes it."""
    return operations.decide_approval(env.kernel, occurrence_id, True, reason)


@command("reject")
@_occurrence_action
@_REASON
def reject(env: Env, occurrence_id: int, reason: str | None) -> Action:
    """Refuse an occurrence awaiting approval: it is skipped (reason approval_rejected)."""
    return operations.decide_approval(env.kernel, occurrence_id, False, reason)
