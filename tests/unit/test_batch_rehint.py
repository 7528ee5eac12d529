"""A long batch's rest sent again while the broker is down: logged, never raised."""

from __future__ import annotations

import logging
import socket
from types import SimpleNamespace

import pytest

from celery_app.factory import create_app
from celery_app.tasks import _rehint


def test_a_rest_the_broker_refuses_is_left_to_the_pump(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app("rehint-test", broker_url=f"redis://127.0.0.1:{port}/0")
    app.conf.broker_connection_timeout = 0.5
    # The task's request as Celery gives it to the running task: where its message came from.
    task = SimpleNamespace(
        app=app, request=SimpleNamespace(delivery_info={"routing_key": "q"}, shadow=None)
    )
    with caplog.at_level(logging.WARNING, logger="celery_kernel.worker"):
        _rehint(task, [11, 12, 13], 2)
    assert "broker unavailable, a long batch's rest not all sent again" in caplog.text
