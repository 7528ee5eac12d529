"""A revoke of a routed run while the kernel's PostgreSQL is away (issue 40's owed mends).

Celery's own revoke runs on the worker whatever the kernel says; the kernel's cancel is
what keeps the run from being hinted again or reclaimed. With the database stopped (its
server process signalled by PID), the worker tries the cancel again while it is away:

* PostgreSQL back within the tries: the run is cancelled, as if it had never been away;
* PostgreSQL still away after them: the worker logs an error naming the task id and the
  command the operator runs (``kernel cancel OCC``); the run is left as it was, and that
  command cancels it once the database is back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project
from servers import RunningServer, ServerUnavailable, start_postgres, unavailable

pytestmark = pytest.mark.long

SETTINGS = """\
imports = ["myproj_tasks"]
kernel_route_tasks = ["myproj.later"]
kernel_rehint_after = 1.0
"""

TASKS = """\
from myproj import app

@app.task(name="myproj.later")
def later(label):
    return label
"""

#: Two routed runs held back an hour: in the kernel, not hinted yet.
HELD = """\
import json
from myproj_tasks import later
print(json.dumps([later.apply_async((label,), countdown=3600).id for label in "ab"]))
"""

REVOKE = """\
import json, sys
from myproj import app
app.control.revoke(sys.argv[1])
print(json.dumps({}))
"""


@pytest.fixture
def server() -> Iterator[RunningServer]:
    """A PostgreSQL of this test's own, to stop and start again."""
    try:
        running = start_postgres()
    except ServerUnavailable as exc:
        unavailable(str(exc))
    try:
        yield running
    finally:
        running.stop()


def _down(server: RunningServer) -> None:
    server.process.send_signal(server.stop_signal)  # fast shutdown: clients are cut off
    server.process.wait(30)


def test_a_revoke_while_the_database_is_away_is_retried_then_named_for_the_operator(
    tmp_path: Path, redis_url: str, server: RunningServer
) -> None:
    stack = Stack(tmp_path, broker_url=redis_url, database_url=server.url)
    try:
        project = Project(stack, settings=SETTINGS, tasks=TASKS)
        worker = project.worker("w1")
        first, second = project.client(HELD)
        runs = {caller: run for run in stack.occurrences("task:myproj.later")
                if (caller := run.trigger_key.removeprefix("key:")) in (first, second)}  # fmt: skip
        assert {run.status.value for run in runs.values()} == {"queued"}

        # Away, then back within the worker's tries: the run is cancelled.
        _down(server)
        project.client(REVOKE.replace("sys.argv[1]", repr(first)))
        stack.wait(
            lambda: f"Tasks flagged as revoked: {first}" in worker.log(),
            timeout=30,
            what="Celery's own revoke on the worker",
        )
        server.start_again()
        stack.wait(
            lambda: stack.occurrence(runs[first].id).status.value == "cancelled",
            timeout=60,
            what="the revoked run cancelled once the database is back",
        )
        assert f"revoke of task {first}: the kernel is unreachable" in worker.log()

        # Away for longer than the tries: an error names the task id and the command.
        _down(server)
        project.client(REVOKE.replace("sys.argv[1]", repr(second)))
        given_up = f"revoke of task {second} was not carried out by the kernel"
        stack.wait(
            lambda: given_up in worker.log(),
            timeout=60,  # the worker tries for about 15 s
            what="the worker giving the revoke up",
        )
        [line] = [x for x in worker.log().splitlines() if given_up in x]
        assert "ERROR" in line and "celery -A myproj kernel cancel OCC" in line
        server.start_again()
        stack.wait(lambda: stack.occurrence(runs[second].id), timeout=30, what="the kernel back")
        assert stack.occurrence(runs[second].id).status.value == "queued"
        stack.cli("cancel", str(runs[second].id))
        assert stack.occurrence(runs[second].id).status.value == "cancelled"
    finally:
        stack.close()
