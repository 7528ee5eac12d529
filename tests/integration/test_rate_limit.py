"""A task's ``rate_limit`` kept by every worker together (issue 38 item 7).

Stock Celery keeps a rate limit per worker process, so two workers run a ``20/m`` task
twice as often as it allows. On the kernel, a routed task's runs take one token of the
task's limit at their claim: four ``.delay()`` calls, two worker processes and no Beat
(a refused hint is sent again for when the token is free, never dropped) → every run
succeeds and the kernel's recorded claims are at least 3 s apart.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
from celery import Celery
from celery_app import install

app = Celery("rl")
app.conf.imports = ["rl_tasks"]
app.conf.kernel_route_tasks = ["rl.limited"]
install(app)
"""

TASKS = """\
from rl import app

@app.task(name="rl.limited", rate_limit="20/m")
def limited(n):
    return n
"""

CALLS = """\
from rl_tasks import limited
for n in range(4):
    limited.delay(n)
"""


@pytest.mark.parametrize("stack", ["embedded", "redis+postgres"], indirect=True)
def test_two_workers_keep_one_rate_limit(stack: Stack) -> None:
    env = {k: v for k, v in stack.env.items() if k != "CELERY_CONFIG_MODULE"}
    for name, text in (("rl", APP), ("rl_tasks", TASKS)):
        (stack.root / f"{name}.py").write_text(text)
    workers = []
    for name in ("w1", "w2"):
        proc = Proc(name, [sys.executable, "-m", "celery", "-A", "rl", "worker", "-c", "1",
                           "-n", f"{name}@%h", "-l", "INFO", "--without-mingle",
                           "--without-gossip"], cwd=stack.root, env=env)  # fmt: skip
        stack.procs.append(proc)
        workers.append(proc)
    for proc in workers:
        stack.wait(lambda proc=proc: proc.logged("ready."), timeout=40, what=f"{proc} ready")
    subprocess.run([sys.executable, "-c", CALLS], cwd=stack.root, env=env, check=True,
                   timeout=90)  # fmt: skip
    job = "task:rl.limited"
    assert stack.kernel.get_job(job).spec["rate_limit"] == "20/m"
    stack.wait(
        lambda: len(runs := stack.occurrences(job)) == 4 and stack.settled(job) and runs,
        timeout=60,
        what="four rate-limited runs settled",
    )
    runs = stack.occurrences(job)
    assert sorted(o.result for o in runs) == [0, 1, 2, 3]
    assert all(o.status.value == "succeeded" for o in runs)
    claimed = sorted(
        e.at
        for o in runs
        for e in stack.kernel.events(occurrence_id=o.id, limit=100)
        if e.type == "occurrence_claimed"
    )
    assert len(claimed) == 4  # one claim each: no refused claim took a token
    gaps = [(b - a).total_seconds() for a, b in zip(claimed, claimed[1:], strict=False)]
    assert min(gaps) >= 3.0, gaps
    # The refused hints were sent again, not dropped (no Beat runs to re-publish them).
    assert any(proc.logged("rate limited until") for proc in workers)
