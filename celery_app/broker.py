"""The embedded broker: kombu's ``filesystem://`` transport, writing whole messages.

kombu's filesystem channel creates a message file, then writes it. A consumer listing
the folder in between moves the still-empty file away and fails to decode it, and the
worker stops ("Unrecoverable error: JSONDecodeError"; seen in the suite). Here a
message is written under a name no consumer takes (no ``.<queue>.msg`` suffix) and
renamed into place: a rename within a folder is atomic, so a consumer finds a message
whole or not at all.

:func:`use_embedded_broker` makes it the broker of any app that names no other, or names
``filesystem://`` without folders of its own.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

from celery_app.config import embedded_broker_options

__all__ = [
    "EMBEDDED_BROKER_URL",
    "EMBEDDED_TRANSPORT",
    "Channel",
    "Transport",
    "use_embedded_broker",
]

EMBEDDED_BROKER_URL = "filesystem://"
EMBEDDED_TRANSPORT = "celery_app.broker:Transport"


class Channel(filesystem.Channel):
    # kombu's filesystem Channel and its base class declare different signatures.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Put ``payload`` onto ``queue``: written aside, then renamed into the folder."""
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        aside = os.path.join(self.data_folder_out, f".writing-{uuid.uuid4()}")
        try:
            with open(aside, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))  # type: ignore[no-untyped-call]
            os.replace(aside, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def use_embedded_broker(app: Any) -> None:
    """Make the embedded broker the broker of ``app`` unless it names another (idempotent).

    An app with no ``broker_url`` (nor ``CELERY_BROKER_URL``) gets ``filesystem://``; a
    ``filesystem://`` broker gets this module's transport and the folders under
    ``KERNEL_VAR_DIR``, unless the app's ``broker_transport_options`` name their own.
    Called when the app's configuration is loaded and again when a worker or Beat starts,
    so a broker URL the app set in between wins.
    """
    conf = app.conf
    if not conf.broker_url:  # Celery reads CELERY_BROKER_URL here first
        conf.broker_url = EMBEDDED_BROKER_URL
    if str(conf.broker_url).startswith(EMBEDDED_BROKER_URL):
        if not conf.broker_transport:
            conf.broker_transport = EMBEDDED_TRANSPORT
        options = conf.broker_transport_options or {}
        conf.broker_transport_options = {**embedded_broker_options(app), **options}
    elif conf.broker_transport == EMBEDDED_TRANSPORT:
        # Set here for a filesystem:// URL the app has since replaced: kombu would
        # otherwise use this transport for the new URL too.
        conf.broker_transport = None
