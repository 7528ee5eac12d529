"""A job's notifications: ``notify: {on: [dead_letter, ...], task: NAME | http: URL}``.

``on`` names what notifies: ``dead_letter`` an occurrence made a dead letter (whoever
made it: its worker, a lease's expiry, an operator's verdict), ``failed`` every failed
run (retried or not; with both, a run that dead-letters notifies once, as
``dead_letter``), ``needs_adjudication`` a run left waiting for a verdict, ``stranded``
the watchdog's finding of an occurrence nothing holds and nothing took, ``watchdog``
every finding the watchdog makes of one of the job's runs (``overrun``, ``stranded``).
The kernel records each in the transaction of the change that causes it
(:mod:`kernel.transitions.notices`). The target is a Celery task (sent by name with the
notification as its ``notification`` keyword) or an http POST of it; the http form is
an http payload (:class:`kernel.spec.payloads.HttpPayload`: ``url``, ``headers``,
``secret_headers``), checked and sent by the same rules as an http job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import Field, model_validator

from kernel.errors import InvalidArgument
from kernel.spec.fields import Check, choice, integer, refuse, seconds, text
from kernel.spec.payload_kinds import check_payload
from kernel.spec.sections import Section
from kernel.states import FAILED

__all__ = ["NOTIFY_EVENTS", "Notify"]

#: What ``on`` may name, in the order of precedence when one change is two of them.
NOTIFY_EVENTS = ("dead_letter", "failed", "needs_adjudication", "stranded", "watchdog")
#: The watchdog's findings about one run, by the name a notification carries.
_FINDINGS = ("overrun", "stranded")
_HTTP_FIELDS = ("url", "headers", "secret_headers")


def _http_target(value: object, field: str) -> dict[str, Any]:
    """A URL or ``{url, headers, secret_headers}`` as the http payload it is sent as."""
    target = {"url": value} if isinstance(value, str) else value
    if not isinstance(target, Mapping):
        raise InvalidArgument(
            field, "must be a URL or an object with url (headers, secret_headers)"
        )
    for name in target:
        if name not in _HTTP_FIELDS:
            raise InvalidArgument(
                f"{field}.{name}" if field else str(name),
                f"unknown field; expected one of {', '.join(_HTTP_FIELDS)}",
            )
    payload, problems = check_payload("http", {**target, "method": "POST"})
    if problems:
        first = problems[0]
        below = first.field.removeprefix("payload").lstrip(".")
        raise InvalidArgument(
            f"{field}.{below}" if field and below else below or field, first.message
        )
    return {name: payload[name] for name in _HTTP_FIELDS if payload.get(name)}


_HTTP = Check(
    _http_target,
    {
        "anyOf": [
            {"type": "string", "format": "uri"},
            {
                "type": "object",
                "required": ["url"],
                "properties": {
                    "url": {"type": "string", "format": "uri"},
                    "headers": {"type": "object"},
                    "secret_headers": {"type": "object"},
                },
                "additionalProperties": False,
            },
        ]
    },
)


class Notify(Section):
    """Who hears of a job's failed and stuck runs: once per run and event, retried
    ``attempts`` times at most, ``backoff_s`` doubling between tries."""

    on: list[Annotated[str, choice(*NOTIFY_EVENTS)]] = Field(
        default_factory=lambda: ["dead_letter"],
        min_length=1,
        description="What notifies: dead_letter, failed (every failed run), "
        "needs_adjudication, stranded, watchdog (every finding of a run).",
    )
    task: Annotated[str, text(1024)] | None = Field(
        default=None, description="A Celery task sent the notification (its name)."
    )
    http: Annotated[dict[str, Any], _HTTP] | None = Field(
        default=None, description="An http endpoint POSTed the notification (a URL or payload)."
    )
    backoff_s: Annotated[float, seconds(1, 86400)] = Field(
        default=30.0, alias="backoff", description="Delay before the second try; doubles."
    )
    attempts: Annotated[int, integer(1, 20)] = Field(
        default=5, description="Tries at most before the notification is given up."
    )

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.task is None) == (self.http is None):
            raise refuse("must name exactly one of task, http")
        if len(set(self.on)) != len(self.on):
            raise refuse("names an event twice", "on")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().to_dict().items() if v is not None}

    def event_of(self, status: str) -> str | None:
        """The event a run that moved to ``status`` notifies as, or None."""
        if status == "dead_letter" and "dead_letter" in self.on:
            return "dead_letter"
        if status in FAILED and "failed" in self.on:
            return "failed"
        if status == "needs_adjudication" and status in self.on:
            return status
        return None

    def finding_of(self, finding: str) -> str | None:
        """The event the watchdog's ``finding`` (overrun, stranded) of a run notifies
        as (the finding's own name), or None."""
        assert finding in _FINDINGS, finding
        if finding in self.on or "watchdog" in self.on:
            return finding
        return None
