"""Inside a kernel run the task is the task (issue 38, items 3, 5, 6).

An own app (its own module, not ``celery_app``) runs under a real worker and Beat:
``self.request`` is filled as Celery fills it, ``self.retry()`` is a kernel retry within
the task's ``max_retries``, Celery's task signals name the app's task (not the kernel's
wrapper), and a failed run keeps its traceback. Where the behaviour is Celery's, the same
tasks are run by stock Celery (``apply()``, no kernel) and the two are compared.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
from datetime import timedelta
from celery import Celery
from celery_app import install

app = Celery("meaning")
app.conf.broker_url = "filesystem://"
app.conf.imports = ["meaning_tasks"]
HOUR = timedelta(days=7)  # never due while the test runs
app.conf.beat_schedule = {
    "retrying": {"task": "meaning.retrying", "schedule": HOUR, "args": [7],
                 "kwargs": {"tag": "x"}},
    "exhausted": {"task": "meaning.exhausted", "schedule": HOUR},
    "boom": {"task": "meaning.boom", "schedule": HOUR, "args": [7]},
}
install(app)
"""

TASKS = """\
import json, os
from celery import signals
from meaning import app

def note(**fields):
    with open(os.environ["MEANING_LEDGER"], "a") as ledger:
        ledger.write(json.dumps(fields) + "\\n")

def _sent(signal):
    def receiver(sender=None, **kw):
        note(signal=signal, sender=getattr(sender, "name", None))
    return receiver

for _name in ("task_prerun", "task_postrun", "task_success", "task_failure", "task_retry"):
    getattr(signals, _name).connect(_sent(_name), weak=False)

@signals.worker_process_init.connect(weak=False)
def trace_spans(**_):
    # A stock OpenTelemetry set-up, as a team would have it: each span's name to the ledger.
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Ledger(SpanExporter):
        def export(self, spans):
            for span in spans:
                note(span=span.name)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Ledger()))
    trace.set_tracer_provider(provider)
    CeleryInstrumentor().instrument()

@app.task(name="meaning.retrying", bind=True, max_retries=2, default_retry_delay=600)
def retrying(self, n, tag=None):
    r = self.request
    note(task="retrying", id=r.id, retries=r.retries, args=list(r.args), kwargs=r.kwargs,
         hostname=r.hostname, routing_key=(r.delivery_info or {}).get("routing_key"),
         called_directly=r.called_directly)
    if r.retries < 2:
        raise self.retry(exc=ValueError("not yet"), countdown=0.5)
    return {"n": n, "tag": tag}

@app.task(name="meaning.exhausted", bind=True, max_retries=1)
def exhausted(self):
    note(task="exhausted", retries=self.request.retries)
    raise self.retry(exc=ValueError("still bad"), countdown=0.5)

def parse(n):
    raise ValueError(f"bad input {n}")

@app.task(name="meaning.boom")
def boom(n):
    parse(n)
"""

#: The same tasks run by stock Celery (``apply()``: no broker, no kernel).
STOCK = """\
import json, sys
import meaning_tasks as t
for name, args, kwargs in json.loads(sys.argv[1]):
    getattr(t, name).apply(args=args, kwargs=kwargs)
"""

CALLS = [("retrying", [7], {"tag": "x"}), ("exhausted", [], {}), ("boom", [7], {})]


def _ledger(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _signals(lines: list[dict[str, Any]], task: str) -> list[str]:
    return [x["signal"] for x in lines if x.get("sender") == task]


def test_the_apps_task_keeps_its_request_retry_signals_and_traceback(stack: Stack) -> None:
    root = stack.root
    (root / "meaning.py").write_text(APP)
    (root / "meaning_tasks.py").write_text(TASKS)
    env = {
        k: v for k, v in stack.env.items() if k not in ("CELERY_CONFIG_MODULE", "KERNEL_JOBS_FILE")
    }
    env["MEANING_LEDGER"] = str(root / "kernel.jsonl")
    stack.database_url = f"sqlite:///{root / 'var' / 'kernel.db'}"

    def start(name: str, *args: str) -> Proc:
        proc = Proc(
            name, [sys.executable, "-m", "celery", "-A", "meaning", *args], cwd=root, env=env
        )
        stack.procs.append(proc)
        return proc

    worker = start("worker", "worker", "-c", "1", "-l", "INFO", "-n", "meaning@testhost", "-E",
                   "--without-mingle", "--without-gossip")  # fmt: skip
    stack.wait(lambda: worker.logged("ready."), timeout=40, what="worker ready")
    # The worker's task events, as Flower receives them (``celery events --dump``).
    events = start("events", "events", "--dump")
    stack.wait(lambda: events.logged("heartbeat"), timeout=40, what="events received")
    start("beat", "beat", "-s", str(root / "beat-schedule"), "-l", "INFO")
    stack.wait(lambda: len(stack.kernel.list_jobs()) == 3, timeout=40, what="jobs applied")
    jobs = {job.id: job.spec for job in stack.kernel.list_jobs()}
    # The attempt budget is the task's max_retries + 1 (Celery's, without autoretry_for).
    assert (jobs["retrying"]["max_attempts"], jobs["exhausted"]["max_attempts"]) == (3, 2)

    retrying, exhausted, boom = (stack.run_now(j) for j in ("retrying", "exhausted", "boom"))
    for job in ("retrying", "exhausted", "boom"):
        stack.wait(lambda job=job: stack.settled(job), timeout=60, what=f"{job} settled")
    kernel_lines = _ledger(root / "kernel.jsonl")

    # self.retry(): kernel retries after the countdown (not the default 600 s), within budget.
    done = stack.occurrence(retrying)
    assert (done.status.value, done.attempt, done.result) == ("succeeded", 3, {"n": 7, "tag": "x"})
    runs = [x for x in kernel_lines if x.get("task") == "retrying"]
    assert [x["retries"] for x in runs] == [0, 1, 2]
    # self.request as Celery fills it: one id across retries, the call's args and kwargs.
    assert len({x["id"] for x in runs}) == 1 and runs[0]["id"]
    assert all(x["args"] == [7] and x["kwargs"] == {"tag": "x"} for x in runs), runs
    assert all(x["hostname"] == "meaning@testhost" and x["routing_key"] == "celery" for x in runs)
    assert not any(x["called_directly"] for x in runs)
    # Celery's own limit ends the retries: the exc given to retry() is the final error.
    spent = stack.occurrence(exhausted)
    assert (spent.status.value, spent.attempt) == ("dead_letter", 2)
    assert spent.last_error["message"].startswith("ValueError: still bad"), spent.last_error

    # Tracebacks: kept (file and line) by the kernel, shown by `occurrences show`, logged.
    failed = stack.occurrence(boom)
    assert failed.status.value == "dead_letter"
    trace = failed.last_error.get("traceback") or ""
    assert 'meaning_tasks.py", line' in trace and "in parse" in trace, failed.last_error
    for command in (["occurrences", "show"], ["why"]):
        shown = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "meaning", "kernel", *command, str(boom)],
            cwd=root, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert "traceback:\nTraceback (most recent call last)" in shown.stdout, shown
        assert "in parse" in shown.stdout and "ValueError: bad input 7" in shown.stdout, shown
    assert "Traceback (most recent call last)" in worker.log()
    assert 'meaning_tasks.py", line' in worker.log()

    # Monitors see the task's own call and result, not the occurrence id and 'succeeded'.
    def event_lines(kind: str) -> list[str]:
        return [x for x in events.log().splitlines() if f"task {kind}: retrying" in x]

    stack.wait(lambda: len(event_lines("succeeded")) == 1, timeout=30, what="succeeded event")
    received = event_lines("received")
    assert len(received) == 3 and all("args=[7] kwargs={'tag': 'x'}" in x for x in received)
    assert "result={'n': 7, 'tag': 'x'}" in event_lines("succeeded")[0]
    assert worker.logged("succeeded in") and worker.logged(": {'n': 7, 'tag': 'x'}")

    # OpenTelemetry's Celery instrumentation names its spans by the app's tasks.
    spans = [x["span"] for x in kernel_lines if "span" in x]
    assert spans.count("run/meaning.retrying") == 3, spans
    assert {"run/meaning.exhausted", "run/meaning.boom"} <= set(spans), spans

    # Stock Celery on the same tasks: the same signals, named by the same tasks.
    stock_env = {**env, "MEANING_LEDGER": str(root / "stock.jsonl")}
    ran = subprocess.run([sys.executable, "-c", STOCK, json.dumps(CALLS)], cwd=root,
                         env=stock_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    stock_lines = _ledger(root / "stock.jsonl")
    for task in ("meaning.retrying", "meaning.exhausted", "meaning.boom"):
        assert _signals(kernel_lines, task) == _signals(stock_lines, task), task
    assert _signals(kernel_lines, "meaning.retrying") == (
        ["task_prerun", "task_retry", "task_postrun"] * 2
        + ["task_prerun", "task_success", "task_postrun"]
    )
    stock_runs = [x for x in stock_lines if x.get("task") == "retrying"]
    assert [x["retries"] for x in stock_runs] == [x["retries"] for x in runs]
    assert [(x["args"], x["kwargs"]) for x in stock_runs] == [
        (x["args"], x["kwargs"]) for x in runs
    ]
