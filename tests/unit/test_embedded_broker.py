"""The embedded broker never hands a consumer a message that is still being written,
nor a binder an exchange table that is still being written.

kombu's filesystem channel names a message file before writing it, so a consumer
listing the folder meanwhile takes an empty message (the worker then stops with
JSONDecodeError, as seen in the suite). Ours writes aside and renames into place.
Its exchange tables had the same gap (two workers starting together); ours are
read, changed and written under the file's lock.
"""

from __future__ import annotations

import json
import multiprocessing
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


def test_an_exchange_table_created_before_it_is_written_breaks_the_stock_binder(
    tmp_path: Path,
) -> None:
    # What kombu's _queue_bind leaves between creating the table and writing it.
    (tmp_path / "x.exchange").write_bytes(b"")
    with _channel(tmp_path, "filesystem") as conn, pytest.raises(json.JSONDecodeError):
        conn.default_channel._queue_bind("x", "q", None, "q")


def test_ours_binds_over_an_empty_table_and_reads_it_as_no_bindings(tmp_path: Path) -> None:
    (tmp_path / "x.exchange").write_bytes(b"")
    with _channel(tmp_path, "celery_app.broker:Transport") as conn:
        channel = conn.default_channel
        assert channel.get_table("x") == []
        channel._queue_bind("x", "q", None, "q")
        channel._queue_bind("x", "q", None, "q")  # once only
        channel._queue_bind("x", "r", None, "r")
        assert [row.queue for row in channel.get_table("x")] == ["r", "q"]


_BINDERS, _ROUNDS = 6, 25


def _bind_in_turns(folder: str, name: str, start: object) -> None:
    with _channel(Path(folder), "celery_app.broker:Transport") as conn:
        channel = conn.default_channel
        for round_ in range(_ROUNDS):
            start.wait(30)  # type: ignore[attr-defined]  # a peer that failed breaks it
            channel._queue_bind(f"x{round_}", name, None, name)


def test_workers_binding_at_once_keep_every_binding(tmp_path: Path) -> None:
    # Real processes released together on fresh exchanges, as workers starting together
    # bind their pidbox queues: none fails, and no binding is lost to another's write.
    context = multiprocessing.get_context("fork")
    start = context.Barrier(_BINDERS)
    binders = [
        context.Process(target=_bind_in_turns, args=(str(tmp_path), f"q{index}", start))
        for index in range(_BINDERS)
    ]
    for binder in binders:
        binder.start()
    for binder in binders:
        binder.join(120)
    assert [binder.exitcode for binder in binders] == [0] * _BINDERS
    with _channel(tmp_path, "celery_app.broker:Transport") as conn:
        for round_ in range(_ROUNDS):
            bound = {row.queue for row in conn.default_channel.get_table(f"x{round_}")}
            assert bound == {f"q{index}" for index in range(_BINDERS)}, round_
