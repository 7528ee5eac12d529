"""The worker's request for a kernel hint: Celery task events that name the job on every
event, not only when the run was received, and Celery's revoked stamps honoured.

Beat publishes each hint under its job's name (Celery's ``shadow``). Celery puts that
name only on ``task-received``: a monitor that subscribed later (Flower started while
the run was under way, which is also when Flower turns task events on) learnt the run
from its ``task-succeeded`` or ``task-failed`` alone and showed the name ``null``.
Events are sent only when they are on, so this costs nothing otherwise.

A stamp revoked before its call was made (``revoke_by_stamped_headers``, which Celery's
worker remembers for the messages it receives later) is checked where Celery checks it,
as the hint is about to run: the routed runs carrying it are cancelled first
(:func:`celery_app.revoking.revoke_remembered_stamps`), then Celery's own check discards
a hint carrying it (a lone stamped run's hint carries its stamps, as its stock message).
"""

from __future__ import annotations

from typing import Any

from celery.worker.request import Request

from celery_app.revoking import revoke_remembered_stamps

__all__ = ["NamedEventsRequest"]


class NamedEventsRequest(Request):
    """The worker's request for a kernel hint: each task event carries the job's name."""

    def send_event(self, type: str, **fields: Any) -> None:  # noqa: A002 - Celery's name
        fields.setdefault("name", self.name)
        super().send_event(type, **fields)

    def revoked(self) -> bool:
        # First: a lone run's hint carries its stamps, which Celery's own check below
        # finds revoked and discards the hint, which would leave its run queued.
        revoke_remembered_stamps(self._app, self.hostname, self.args)
        return bool(super().revoked())
