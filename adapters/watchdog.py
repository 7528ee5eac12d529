"""The ``watchdog`` adapter: run a check and turn its outcome into a report.

The check is a command, run exactly as the ``shell`` kind runs one (the same
supervisor, scrubbed environment and secrets), or a function, called as the
``callable`` kind calls one. It fails by a non-zero exit, an exception, or the job's
``timeout``. The run itself succeeds either way: its result ``{"watchdog": report}``
is what the kernel settles with, and the kernel then appends the ``watchdog_alert``
event and, when the watchdog self-destructs, disables the job (:mod:`kernel.upkeep.watchdog_jobs`,
through the kind's result hook). A failing check's alert is also sent to the payload's
``alert`` target, if it names one, before the run settles.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from adapters.base import (
    NO_RUNTIME_CONTROL,
    AdapterError,
    BaseAdapter,
    Cancelled,
    ExecutionContext,
    read_payload,
    tail_text,
)
from adapters.callable import CallableAdapter
from adapters.secrets import scrub
from adapters.shell import ShellAdapter
from kernel import (
    WATCHDOG_OUTPUT_TAIL,
    CallablePayload,
    WatchdogAlert,
    WatchdogPayload,
)

__all__ = ["WatchdogAdapter", "ALERT_POST_TIMEOUT_S"]

#: How long an alert POST may take; a slow alert target must not hold the run's lease.
ALERT_POST_TIMEOUT_S = 10.0


class WatchdogAdapter(BaseAdapter):
    """Runs ``payload["check"]``; the result is ``{"watchdog": report}``.

    A report is ``{"passed", "reason", "exit_code", "message", "output_tail",
    "delivered"}``: ``reason`` is None for a passing check, else ``exit``, ``timeout``,
    ``error`` (the command could not start) or ``exception``; ``delivered`` says
    whether the alert reached the payload's ``alert`` target (None when there is none
    or nothing to send). A running check cannot be paused.
    """

    kind = "watchdog"
    runtime_control = NO_RUNTIME_CONTROL

    def __init__(self, app: Any = None) -> None:
        super().__init__(app)
        self._shell = ShellAdapter(app)
        self._callable = CallableAdapter(app)

    def execute(self, ctx: ExecutionContext) -> Any:
        payload = read_payload(ctx.occurrence.payload, WatchdogPayload)
        if isinstance(payload.check, CallablePayload):
            report = self._call(ctx, payload.check)
        else:
            report = self._run(ctx, payload)
        report["delivered"] = None
        if not report["passed"] and payload.alert is not None:
            report["delivered"] = self._deliver(ctx, payload, report)
        return {self.kind: report}

    def _run(self, ctx: ExecutionContext, payload: WatchdogPayload) -> dict[str, Any]:
        assert not isinstance(payload.check, CallablePayload)
        try:
            finished = self._shell.run(ctx, payload.check)
        except AdapterError as exc:  # the command could not start: the check fails
            return _report("error", exc.message)
        if finished.stopped == "cancelled":
            raise Cancelled(f"occurrence {ctx.occurrence.id} was cancelled; its check stopped")
        output = "\n".join(text for text in (finished.stdout, finished.stderr) if text.strip())
        problem = finished.problem(ctx.timeout_s)
        if problem is None:
            return _report(None, "", exit_code=0, output=output)
        code, message = problem
        reason = "timeout" if code == "TIMEOUT" else "exit"
        exit_code = None if reason == "timeout" else finished.returncode
        return _report(reason, message, exit_code=exit_code, output=output)

    def _call(self, ctx: ExecutionContext, check: CallablePayload) -> dict[str, Any]:
        try:
            self._callable.call(ctx, check)
        except Cancelled:
            raise
        except Exception as exc:  # a check may raise anything: that is how it fails
            reason = "timeout" if isinstance(exc, TimeoutError) else "exception"
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return _report(reason, scrub(text, ctx.secrets))
        return _report(None, "")

    def _deliver(
        self, ctx: ExecutionContext, payload: WatchdogPayload, report: dict[str, Any]
    ) -> bool:
        """Send the alert to the payload's target; a failure is logged, never raised:
        the kernel's event is the alert of record."""
        alert = payload.alert
        assert alert is not None
        occurrence = ctx.occurrence
        body = {
            "job_id": occurrence.job_id,
            "occurrence_id": occurrence.id,
            "target": payload.target,
            **{key: report[key] for key in ("reason", "exit_code", "message", "output_tail")},
        }
        try:
            self._send(alert, body)
        except Exception as exc:  # an alert target's failure must not fail the watchdog
            ctx.logger.warning(
                "watchdog alert not delivered to %s %s: %s",
                alert.channel,
                alert.target,
                exc,
                extra={"action": "watchdog_alert_undelivered", "occurrence_id": occurrence.id},
            )
            return False
        return True

    def _send(self, alert: WatchdogAlert, body: dict[str, Any]) -> None:
        if alert.channel == "task":
            if self.app is None:
                raise RuntimeError("the watchdog adapter was loaded without a Celery app")
            self.app.send_task(alert.target, args=[body])
            return
        request = urllib.request.Request(
            alert.target,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=ALERT_POST_TIMEOUT_S):
            pass  # any 2xx answer will do; urlopen raises on the others


def _report(
    reason: str | None, message: str, *, exit_code: int | None = None, output: str = ""
) -> dict[str, Any]:
    return {
        "passed": reason is None,
        "reason": reason,
        "exit_code": exit_code,
        "message": message,
        "output_tail": tail_text(output.strip(), WATCHDOG_OUTPUT_TAIL),
    }
