"""Issue 40's call options together, on Redis and PostgreSQL, with the kernel busy around
them: retention pruning every second, two Beats, and a Beat entry with an overlap policy.

Each option is still honoured: a call's custom headers and time limits reach the body's
``self.request``; ``ignore_result=True`` stores nothing in the result backend; a revoke
of a held call cancels it (never run, REVOKED); ``self.replace(sig)`` answers the
replacement's result; ``self.retry(args=...)`` runs again with the new arguments. Beside
them the entry ``tick`` (``overlap: skip``, slower than its schedule) never runs twice
at once though two Beats fire it, and retention prunes the history as it goes.
"""

from __future__ import annotations

import pytest
import redis
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

SETTINGS = """\
import os
imports = ["myproj_tasks"]
broker_url = result_backend = os.environ["CELERY_BROKER_URL"]
kernel_route_tasks = ["myproj.routed.*"]
kernel_rehint_after = 1.0
kernel_retention_succeeded = kernel_retention_cancelled = kernel_retention_skipped = "1s"
kernel_retention_interval = 1.0
beat_schedule = {
    "tick": {"task": "myproj.routed.tick", "schedule": 1.0, "kernel": {"overlap": "skip"}},
}
"""

TASKS = """\
import json, os, time
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps(fields) + "\\n")

@app.task(name="myproj.routed.seen", bind=True)
def seen(self):
    request = self.request
    return {"tenant": getattr(request, "tenant", None), "timelimit": list(request.timelimit)}

@app.task(name="myproj.routed.quiet", bind=True)
def quiet(self):
    note(task="quiet", id=self.request.id)
    return "quiet"

@app.task(name="myproj.routed.later")
def later():
    note(task="later")

@app.task(name="myproj.routed.add")
def add(x, y):
    return x + y

@app.task(name="myproj.routed.replaced", bind=True)
def replaced(self, x):
    return self.replace(add.s(x, 10))

@app.task(name="myproj.routed.to_args", bind=True, max_retries=1)
def to_args(self, foo):
    if not self.request.retries:
        raise self.retry(args=(foo + 1,), countdown=0)
    return foo

@app.task(name="myproj.routed.tick", bind=True)
def tick(self):
    note(task="tick", event="start", id=self.request.id)
    time.sleep(2.5)
    note(task="tick", event="end", id=self.request.id)
"""

CALLS = """\
import json, time
from myproj import app
app.loader.import_default_modules()
t = {name.rsplit(".", 1)[1]: task for name, task in app.tasks.items()
     if name.startswith("myproj.routed.")}

out = {"seen": t["seen"].apply_async(headers={"tenant": "t-1"}, time_limit=30,
                                     soft_time_limit=20).get(timeout=60)}
out["quiet"] = t["quiet"].apply_async(ignore_result=True).id
later = t["later"].apply_async(countdown=3600)
later.revoke()
deadline = time.monotonic() + 60
while later.state != "REVOKED" and time.monotonic() < deadline:
    time.sleep(0.2)
out["later"] = [later.id, later.state]
out["replaced"] = t["replaced"].delay(1).get(timeout=60)
out["to_args"] = t["to_args"].delay(1).get(timeout=60)
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_the_call_options_hold_with_pruning_two_beats_and_an_overlap_policy(
    stack: Stack,
) -> None:
    project, _ = Project.running(stack, TASKS, settings=SETTINGS, concurrency=2)
    second = project.start("beat-2", "beat", "-s", str(stack.root / "beat-schedule-2"),
                           "-l", "INFO")  # fmt: skip
    stack.wait(lambda: len(stack.kernel.beats()) == 2, timeout=60, what="both Beats ticking")

    out = project.client(CALLS)
    assert out["seen"] == {"tenant": "t-1", "timelimit": [30, 20]}
    assert out["replaced"] == 11 and out["to_args"] == 2
    later_id, later_state = out["later"]
    assert later_state == "REVOKED"
    stack.wait(lambda: project.ledger(task="quiet"), timeout=60, what="the quiet call ran")
    backend = redis.Redis.from_url(stack.env["CELERY_BROKER_URL"])
    try:
        assert not backend.exists(f"celery-task-meta-{out['quiet']}")  # ignore_result
        assert backend.exists(f"celery-task-meta-{later_id}")  # REVOKED, stored
    finally:
        backend.close()

    def ticks() -> list[dict[str, str]] | None:
        ran = project.ledger(task="tick")
        return ran if sum(x["event"] == "end" for x in ran) >= 4 else None

    ran = stack.wait(ticks, timeout=90, what="four ticks ran")
    # overlap: skip, two Beats: never two runs at once, each run once.
    events = [x["event"] for x in ran]
    assert events[: len(events) // 2 * 2] == ["start", "end"] * (len(events) // 2), events
    starts = [x["id"] for x in ran if x["event"] == "start"]
    assert len(starts) == len(set(starts))
    assert project.ledger(task="later") == []
    stack.wait(
        lambda: any(e.type == "history_pruned" for e in stack.kernel.events(limit=1000)),
        timeout=60,
        what="retention pruning the history",
    )
    assert second.popen.poll() is None
