"""The embedded broker: kombu's ``filesystem://`` transport, writing whole messages.

kombu's filesystem channel creates a message file, then writes it. A consumer listing
the folder in between moves the still-empty file away and fails to decode it, and the
worker stops ("Unrecoverable error: JSONDecodeError"; seen in the suite). Here a
message is written under a name no consumer takes (no ``.<queue>.msg`` suffix) and
renamed into place: a rename within a folder is atomic, so a consumer finds a message
whole or not at all.
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

__all__ = ["Channel", "Transport"]


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
