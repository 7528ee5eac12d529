"""End-to-end fixtures: a fresh :class:`~integration.stack.Stack` per test, its logs on failure.

``stack`` is the embedded default (``filesystem://`` broker, SQLite under
``./var``); parametrise it indirectly with ``"redis"`` (the session's Redis
broker, SQLite) or ``"redis+postgres"`` (Redis, and a fresh PostgreSQL database),
or the same with ``"rabbitmq"`` (the session's RabbitMQ node: durable queues, as
kombu declares them, and ``task_acks_late``, as RabbitMQ users run Celery).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from integration.stack import LOG_TAIL, Stack

BACKENDS = ("embedded", "redis", "redis+postgres", "rabbitmq", "rabbitmq+postgres")


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """A fresh :class:`Stack` in ``tmp_path``; ``request.param`` picks the back end."""
    backend = getattr(request, "param", "embedded")
    if backend not in BACKENDS:
        raise ValueError(f"unknown back end {backend!r}; one of {BACKENDS}")
    broker = backend.split("+")[0]
    broker_url = request.getfixturevalue(f"{broker}_url") if broker != "embedded" else None
    database_url = (
        request.getfixturevalue("pg_database_url") if backend.endswith("+postgres") else None
    )
    made = Stack(tmp_path, broker_url=broker_url, database_url=database_url)
    try:
        yield made
    finally:
        made.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of every process log to a failed test's report, and the stacks of
    a process that had to be killed."""
    report = yield
    made = getattr(item, "funcargs", {}).get("stack")
    if report.failed and isinstance(made, Stack):
        for proc in made.procs:
            report.sections.append(
                (f"{proc.name} log (pid {proc.pid}, last {LOG_TAIL} lines)", proc.tail())
            )
            if proc.hang is not None:
                report.sections.append((f"{proc.name} stacks when it was killed", proc.hang))
    return report
