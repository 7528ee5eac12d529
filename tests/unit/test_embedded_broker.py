"""The embedded broker never hands a consumer a message that is still being written.

kombu's filesystem channel names a message file before writing it, so a consumer
listing the folder meanwhile takes an empty message (the worker then stops with
JSONDecodeError, as seen in the suite). Ours writes aside and renames into place.
"""

from __future__ import annotations

import json
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection


def _channel(folder: Path, transport: str) -> Connection:
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(folder),
        "store_processed": False,
    }
    return Connection("filesystem://", transport=transport, transport_options=options)


def test_a_message_file_named_before_it_is_written_breaks_the_stock_consumer(
    tmp_path: Path,
) -> None:
    # What kombu's _put leaves between open() and write(): a named, empty message.
    (tmp_path / "1_a.q.msg").write_bytes(b"")
    with _channel(tmp_path, "filesystem") as conn, pytest.raises(json.JSONDecodeError):
        conn.default_channel._get("q")


def test_ours_writes_aside_so_a_consumer_sees_whole_messages_or_none(tmp_path: Path) -> None:
    # What our _put leaves before its rename: a file no consumer takes.
    (tmp_path / ".writing-1").write_bytes(b"")
    with _channel(tmp_path, "celery_app.broker:Transport") as conn:
        channel = conn.default_channel
        with pytest.raises(Empty):
            channel._get("q")
        channel._put("q", {"body": "whole"})
        assert channel._get("q") == {"body": "whole"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".writing-1"]


def test_the_embedded_default_uses_it() -> None:
    from celery_app import app

    assert app.conf.broker_url == "filesystem://"
    assert app.conf.broker_transport == "celery_app.broker:Transport"
