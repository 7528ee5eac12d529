"""The embedded broker: kombu's ``filesystem://`` transport, writing whole messages.

kombu's filesystem channel creates a message file, then writes it. A consumer listing
the folder in between moves the still-empty file away and fails to decode it, and the
worker stops ("Unrecoverable error: JSONDecodeError"; seen in the suite). Here a
message is written under a name no consumer takes (no ``.<queue>.msg`` suffix) and
renamed into place: a rename within a folder is atomic, so a consumer finds a message
whole or not at all.

An exchange's bindings file has the same gap: kombu creates it, then locks and writes it,
so a second worker binding at that moment (two workers starting together) read it empty
and stopped the same way (seen in the suite). Here the file is opened without truncation,
locked, then read, changed and rewritten under the lock, and an empty file reads as no
bindings yet.

:func:`use_embedded_broker` makes it the broker of any app that names no other, or names
``filesystem://`` without folders of its own.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps, loads

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

    def _queue_bind(self, exchange: Any, routing_key: Any, pattern: Any, queue: Any) -> None:
        """Add ``queue``'s binding to ``exchange``'s table, created empty if missing, all
        under an exclusive lock of the file (readers take a shared one)."""
        path = self._exchange_file(exchange)  # type: ignore[no-untyped-call]
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            self.control_folder.mkdir(exist_ok=True)
            with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), "r+b", buffering=0) as file:
                fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
                table = _bindings(file.read())
                if binding not in table:
                    file.seek(0)
                    file.truncate()
                    file.write(str_to_bytes(dumps([binding, *table])))  # type: ignore[no-untyped-call]
        except OSError as exc:
            raise ChannelError(f"Cannot open {path}") from exc

    def get_table(self, exchange: Any) -> list[Any]:
        """``exchange``'s bindings: none while its file is missing or not yet written."""
        path = self._exchange_file(exchange)  # type: ignore[no-untyped-call]
        try:
            with open(path, "rb") as file:
                fcntl.flock(file, fcntl.LOCK_SH)
                return _bindings(file.read())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {path}") from exc


def _bindings(text: bytes) -> list[Any]:
    rows = loads(text) if text else []  # type: ignore[no-untyped-call]
    return [filesystem.exchange_queue_t(*row) for row in rows]


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
