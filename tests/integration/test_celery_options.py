"""Celery's options mean on the kernel what they mean to stock Celery (issue 38 item 7).

One own app (``options_app.py``, not ``celery_app``) is run twice in each test, on real
worker processes and a real broker: as stock Celery (no kernel), then with
``install(app)`` and its tasks routed through the kernel (``kernel_route_tasks``). The
same calls, with the same options, must mean the same thing, read from what the tasks
recorded: ``expires`` never runs a stale call, ``priority`` orders a backlog as the
broker orders it, ``soft_time_limit`` reaches the body and ``time_limit`` ends the run,
``countdown``/``eta`` hold the start back, what a call sets for the body's
``self.request`` (custom headers, ``app_id``, time limits, ``ignore_result``, stamps)
reaches it, and a revoke (by task id, from the CLI, by stamps, with terminate) stops it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

#: Makes the calls given as JSON ``[task, tag, options]``; ``eta_in`` is an ``eta`` that
#: many seconds from the call. Each call's task id and wall-clock time go to the ledger first.
CALLS = """\
import json, sys, uuid
from datetime import UTC, datetime, timedelta
import options_app as opts
for task, tag, options in json.loads(sys.argv[1]):
    options["task_id"] = str(uuid.uuid4())
    opts.note(call=tag, id=options["task_id"])
    if "eta_in" in options:
        options["eta"] = datetime.now(UTC) + timedelta(seconds=options.pop("eta_in"))
    getattr(opts, task).apply_async((tag,), **options)
"""

#: Revokes as a caller does: ``id`` (the task id) by ``AsyncResult.revoke``, ``stamps``
#: (stamp name to value) by ``app.control.revoke_by_stamped_headers``; argv[3] terminate.
REVOKE = """\
import json, sys
import options_app as opts
how, arg, terminate = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
if how == "id":
    opts.app.AsyncResult(arg).revoke(terminate=terminate)
else:
    opts.app.control.revoke_by_stamped_headers(arg, terminate=terminate)
"""


@dataclass
class Side:
    """The app as stock Celery or on the kernel: its own queue, ledger and worker."""

    stack: Stack
    kernel: bool
    queue: str = field(default_factory=lambda: f"opts-{uuid.uuid4().hex[:10]}")

    @property
    def name(self) -> str:
        return "kernel" if self.kernel else "stock"

    @property
    def ledger_path(self) -> Path:
        return Path(self.stack.root, f"{self.name}.jsonl")

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in self.stack.env.items() if k != "CELERY_CONFIG_MODULE"}
        env.update(OPTS_QUEUE=self.queue, OPTS_LEDGER=str(self.ledger_path))
        if env["CELERY_BROKER_URL"].startswith("redis"):  # results there too (test_6)
            env["OPTS_BACKEND"] = env["CELERY_BROKER_URL"]
        if self.kernel:
            env.update(OPTS_KERNEL="1", KERNEL_DATABASE_URL=self.stack.database_url)
        return env

    def call(self, *calls: tuple[str, str, dict[str, Any]]) -> None:
        subprocess.run([sys.executable, "-c", CALLS, json.dumps(calls)], cwd=self.stack.root,
                       env=self.env, check=True, timeout=120)  # fmt: skip

    def revoke(self, how: str, arg: Any, terminate: bool = False) -> None:
        subprocess.run([sys.executable, "-c", REVOKE, how, json.dumps(arg), str(int(terminate))],
                       cwd=self.stack.root, env=self.env, check=True, timeout=60)  # fmt: skip

    def celery_cli(self, *args: str) -> str:
        """``celery -A options_app ARGS`` from a shell of its own; its output."""
        done = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "options_app", *args],
            cwd=self.stack.root, env=self.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and "Traceback" not in done.stderr, done
        return done.stdout

    def start_worker(self) -> Proc:
        """One process taking one message at a time (prefork: time limits need it)."""
        proc = Proc(
            f"{self.name}-worker",
            [sys.executable, "-m", "celery", "-A", "options_app", "worker", "-P", "prefork",
             "-c", "1", "--prefetch-multiplier", "1", "-Q", self.queue,
             "-n", f"{self.name}@%h", "-l", "INFO", "--without-mingle", "--without-gossip"],
            cwd=self.stack.root,
            env=self.env,
        )  # fmt: skip
        self.stack.procs.append(proc)
        self.stack.wait(lambda: proc.logged("ready."), timeout=60, what=f"{proc.name} ready")
        return proc

    def start_beat(self) -> Proc:
        proc = Proc(
            f"{self.name}-beat",
            [sys.executable, "-m", "celery", "-A", "options_app", "beat", "-l", "INFO",
             "-s", str(self.stack.root / f"{self.name}-schedule")],
            cwd=self.stack.root,
            env=self.env,
        )  # fmt: skip
        self.stack.procs.append(proc)
        self.stack.wait(lambda: self.stack.kernel.beats(), timeout=60, what="beat heartbeat")
        return proc

    def ledger(self, **match: Any) -> list[dict[str, Any]]:
        if not self.ledger_path.exists():
            return []
        lines = [json.loads(line) for line in self.ledger_path.read_text().splitlines()]
        return [line for line in lines if all(line.get(k) == v for k, v in match.items())]

    def kernel_cli(self, *args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "options_app", "kernel", *args, "--json"],
            cwd=self.stack.root, env=self.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and "Traceback" not in done.stderr, done
        return json.loads(done.stdout)


@pytest.fixture
def sides(stack: Stack) -> tuple[Side, Side]:
    return Side(stack, kernel=False), Side(stack, kernel=True)


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_1_expires_a_call_no_worker_took_in_time_never_runs(
    stack: Stack, sides: tuple[Side, Side]
) -> None:
    for side in sides:
        # Queued while no worker listens; the deadline passes before one starts.
        side.call(("record", "stale", {"expires": 2}))
        stack.wait(lambda side=side: _since_call(side, "stale") > 3, timeout=30,
                   what="expires passed")  # fmt: skip
        side.start_worker()
        side.call(("record", "fresh", {"expires": 60}))
        stack.wait(lambda side=side: side.ledger(task="record", tag="fresh"), timeout=60,
                   what=f"{side.name}: the fresh call ran")  # fmt: skip
    stock, kernel = sides
    # Stock Celery: the worker got the message after its expiry and revoked it unrun.
    assert stock.ledger(task="record", tag="stale") == []
    stale_id = stock.ledger(call="stale")[0]["id"]
    assert f"Discarding revoked task: opts.record[{stale_id}]" in stack.procs[0].log()
    # The kernel: the run was skipped `expired` (its event, and `why` says so), never run.
    assert kernel.ledger(task="record", tag="stale") == []
    stale = _occurrence(stack, "stale")
    assert (stale.status.value, stale.skip_reason) == ("skipped", "expired"), stale
    skipped = [e for e in stack.kernel.events(occurrence_id=stale.id, limit=100)
               if e.type == "occurrence_skipped"]  # fmt: skip
    assert len(skipped) == 1 and "expired" in json.dumps(skipped[0].data), skipped
    assert "expired" in json.dumps(kernel.kernel_cli("why", str(stale.id)))


def _since_call(side: Side, tag: str) -> float:
    return time.time() - float(side.ledger(call=tag)[0]["at"])


def _occurrence(stack: Stack, tag: str) -> Any:
    """The kernel's run of the routed call given ``tag``."""
    found = [o for o in stack.kernel.list_occurrences(limit=1000)
             if (o.definition.get("payload") or {}).get("args") == [tag]]  # fmt: skip
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("stack", ["redis", "rabbitmq"], indirect=True)
def test_2_priority_orders_a_backlog_as_the_broker_does(
    stack: Stack, sides: tuple[Side, Side]
) -> None:
    # One at 9 before and one after 20 at 0, all queued while no worker runs; then one
    # worker taking one message at a time.
    calls = [
        ("record", "high-first", {"priority": 9}),
        *(("record", f"low-{n:02}", {"priority": 0}) for n in range(20)),
        ("record", "high-last", {"priority": 9}),
    ]
    order = {}
    for side in sides:
        side.call(*calls)
        side.start_worker()
        stack.wait(lambda side=side: len(side.ledger(task="record")) == 22, timeout=90,
                   what=f"{side.name}: 22 runs")  # fmt: skip
        order[side.name] = [line["tag"] for line in side.ledger(task="record")]
    high = {}
    for name, ran in order.items():
        assert sorted(ran) == sorted(tag for _, tag, _ in calls), ran
        high[name] = [ran.index("high-first"), ran.index("high-last")]
    if stack.env["CELERY_BROKER_URL"].startswith("amqp"):
        # A priority queue (task_queue_max_priority): higher first. Stock Celery's worker
        # may run one message it fetched before the broker sorted the backlog.
        assert max(high["stock"]) <= 2 and high["kernel"] == [0, 1], order
    else:
        # Redis runs Celery's 0 first and 9 last; the kernel keeps that order.
        assert high["stock"] == high["kernel"] == [20, 21], order


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_3_time_limits_of_a_call_reach_the_body_and_end_the_run(
    stack: Stack, sides: tuple[Side, Side]
) -> None:
    stock = sides[0]
    for side in sides:
        worker = side.start_worker()
        side.call(("soft", "soft", {"soft_time_limit": 1}), ("hard", "hard", {"time_limit": 2}))
        stack.wait(lambda side=side, worker=worker: _hard_ended(side, worker), timeout=60,
                   what=f"{side.name}: the hard-limited run ended")  # fmt: skip
    for side in sides:
        # soft_time_limit: the body is told, and stops in time.
        told = [x["event"] for x in side.ledger(task="soft")]
        assert told == ["started", "SoftTimeLimitExceeded"], side.name
        # time_limit: the run is ended before its body finishes.
        assert [x["event"] for x in side.ledger(task="hard")] == ["started"], side.name
    log = stack.procs[0].log()
    hard_id = stock.ledger(call="hard")[0]["id"]
    soft_id = stock.ledger(call="soft")[0]["id"]
    assert f"opts.soft[{soft_id}] succeeded" in log and "'stopped in time'" in log
    # Stock Celery: the pool kills the process at the hard limit (no SoftTimeLimitExceeded).
    assert f"Hard time limit (2s) exceeded for opts.hard[{hard_id}]" in log
    assert "raised error: TimeLimitExceeded(2)" in log
    # The kernel: the soft-limited run succeeded with what the body returned; the
    # hard-limited one is a TIMEOUT failure, final (max_retries=0).
    soft = _occurrence(stack, "soft")
    assert (soft.status.value, soft.result) == ("succeeded", "stopped in time"), soft
    hard = _occurrence(stack, "hard")
    assert (hard.status.value, hard.last_error["code"]) == ("dead_letter", "TIMEOUT"), hard


def _hard_ended(side: Side, worker: Proc) -> Any:
    """Stock: the pool killed the process (its log says so); the kernel: the run settled."""
    if side.kernel:
        return bool(side.stack.occurrences("task:opts.hard")) and side.stack.settled(
            "task:opts.hard"
        )
    return worker.logged(f"exceeded for opts.hard[{side.ledger(call='hard')[0]['id']}]")


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_4_countdown_and_eta_hold_a_call_back(stack: Stack, sides: tuple[Side, Side]) -> None:
    """No Beat runs: a held-back call's hint is published at the call with Celery's own
    ``eta``, so the worker holds it as it holds a stock message, and claims at the time."""
    for side in sides:
        side.start_worker()
        side.call(("record", "countdown", {"countdown": 3}), ("record", "eta", {"eta_in": 3}),
                  ("record", "now", {}))  # fmt: skip
        stack.wait(lambda side=side: len(side.ledger(task="record")) == 3, timeout=60,
                   what=f"{side.name}: three runs")  # fmt: skip
    for side in sides:
        waited = {tag: _started(side, tag) - side.ledger(call=tag)[0]["at"]
                  for tag in ("countdown", "eta", "now")}  # fmt: skip
        # Not before its time (a tenth of a second for the clocks' reading), and the call
        # without one was not held back behind them.
        assert waited["countdown"] > 2.9 and waited["eta"] > 2.9, (side.name, waited)
        assert waited["now"] < waited["countdown"], (side.name, waited)


def _started(side: Side, tag: str) -> float:
    [line] = side.ledger(task="record", tag=tag)
    return float(line["at"])


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_5_task_routes_send_a_call_to_the_queue_its_worker_consumes(
    stack: Stack, sides: tuple[Side, Side]
) -> None:
    """``opts.routed`` has no queue of its own; ``task_routes`` names the one queue the
    worker consumes, and the call runs there, as under stock Celery."""
    for side in sides:
        side.start_worker()
        side.call(("routed", "by-route", {}))
        stack.wait(lambda side=side: side.ledger(task="routed"), timeout=60,
                   what=f"{side.name}: the routed call ran")  # fmt: skip
    run = _occurrence(stack, "by-route")
    assert (run.queue, run.status.value) == (sides[1].queue, "succeeded"), run


#: Calls whose request fields the body records; each side must record the same.
_REQUEST_CALLS = [
    ("headers", {"headers": {"x-test-header": "v", "tenant": "t"}}),
    ("app_id", {"app_id": "1234"}),
    ("own-limits", {}),
    ("call-limits", {"time_limit": 30, "soft_time_limit": 20}),
    ("ignored", {"ignore_result": True}),
    ("stamped", {"stamped_headers": ["monitoring_id"], "monitoring_id": "m-1"}),
]


#: Retried once: what the request still holds of the call after the retry.
_RETRIED_CALLS = [
    ("retry-headers", {"headers": {"x-test-header": "v"}}),
    ("retry-ignored", {"ignore_result": True}),
]


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_6_what_a_call_sets_reaches_the_body_s_request(
    stack: Stack, sides: tuple[Side, Side]
) -> None:
    """Celery's t/integration test_properties, test_task_retried_headers,
    test_request_time_limits_*, test_ignore_result, test_retry_preserves_ignore_result_true:
    the same calls, the same request, across a retry too; an ignored result is not stored."""
    import redis

    seen = {}
    for side in sides:
        side.start_worker()
        if side.kernel:
            side.start_beat()  # its pump hints a retried run again
        side.call(*(("request", tag, options) for tag, options in _REQUEST_CALLS),
                  *(("retry_once", tag, options) for tag, options in _RETRIED_CALLS))  # fmt: skip
        stack.wait(lambda side=side: len(side.ledger(task="request")) == len(_REQUEST_CALLS)
                   and len(side.ledger(task="retry_once")) == len(_RETRIED_CALLS),
                   timeout=60, what=f"{side.name}: the calls ran")  # fmt: skip
        seen[side.name] = {
            line["tag"]: {k: v for k, v in line.items() if k != "at"}
            for line in side.ledger(task="request") + side.ledger(task="retry_once")
        }
    assert seen["kernel"] == seen["stock"], seen
    assert seen["kernel"]["headers"]["tenant"] == "t" and seen["kernel"]["app_id"]["app_id"]
    assert seen["kernel"]["retry-headers"]["headers"] == {"x-test-header": "v"}
    client = redis.Redis.from_url(stack.env["CELERY_BROKER_URL"])
    try:
        for side in sides:
            # One process runs the calls in turn: once a later call's result is stored,
            # the ignored ones' would have been.
            side.call(("request", "last", {}))
            last = side.ledger(call="last")[0]["id"]
            stack.wait(lambda last=last: client.exists(f"celery-task-meta-{last}"),
                       timeout=30, what=f"{side.name}: the last result stored")  # fmt: skip
            for tag in ("ignored", "retry-ignored", "app_id"):
                stored = client.exists(f"celery-task-meta-{side.ledger(call=tag)[0]['id']}")
                assert bool(stored) is (tag == "app_id"), (side.name, tag)
    finally:
        client.close()


#: Held back by an eta, then revoked before it (by task id, by the ``celery control revoke``
#: command of another process, by stamps), or not revoked at all (``kept``: held as long).
_HELD_CALLS = [
    ("by-id", {}),
    ("by-cli", {}),
    ("by-stamp", {"stamped_headers": ["mon"], "mon": "m-7"}),
    ("kept", {}),
    ("kept-stamp", {"stamped_headers": ["mon"], "mon": "m-8"}),
]
_REVOKED = ["by-id", "by-cli", "by-stamp", "terminated", "late-stamp"]
REVOKE_WINDOW_S = 45


@pytest.mark.timeout(420)  # two sides waiting out their etas
@pytest.mark.parametrize("stack", ["redis", "redis+postgres"], indirect=True)
def test_7_a_revoke_stops_a_routed_call_as_it_stops_celerys(
    stack: Stack, sides: tuple[Side, Side]
) -> None:
    """``AsyncResult.revoke()``, ``celery control revoke ID`` and
    ``revoke_by_stamped_headers`` before the call's eta: it never runs and its result is
    REVOKED, and so for a call made after its stamp was revoked; ``revoke(terminate=True)``
    of a running call stops it (Celery signals the process running it, on both sides),
    REVOKED too. The kernel's revoke is its cancel."""
    import redis

    client = redis.Redis.from_url(stack.env["CELERY_BROKER_URL"])
    try:
        # Both sides' calls and revokes first, then both sides' outcomes: their etas run out
        # together instead of one after the other.
        revoked = {side.name: _revoke_held_calls(stack, side) for side in sides}
        for side in sides:
            ids = revoked[side.name]
            stack.wait(lambda side=side: {line["tag"] for line in side.ledger(task="record")}
                       >= {"kept", "kept-stamp"}, timeout=60,
                       what=f"{side.name}: the calls not revoked ran")  # fmt: skip
            stack.wait(lambda ids=ids: all(_state(client, ids[tag]) == "REVOKED"
                                           for tag in _REVOKED), timeout=60,
                       what=f"{side.name}: the revoked calls' results REVOKED")  # fmt: skip
            ran = sorted(line["tag"] for line in side.ledger(task="record"))
            assert ran == ["kept", "kept-stamp"], (side.name, ran)
            assert [x["event"] for x in side.ledger(task="steps")] == ["started"], side.name
            # The body writes its ledger line before its worker stores the result.
            stack.wait(lambda ids=ids: None not in {_state(client, ids[tag])
                                                   for tag in ("kept", "kept-stamp")},
                       timeout=60, what=f"{side.name}: the kept calls' results stored")  # fmt: skip
            assert {_state(client, ids[tag]) for tag in ("kept", "kept-stamp")} == {"SUCCESS"}
    finally:
        client.close()
    # The kernel: each revoked run is cancelled, by its cancel's event naming the revoke
    # (the terminated one once its lease expires, which Beat's upkeep settles: Celery
    # signalled the process running it).
    sides[1].start_beat()
    for tag in _REVOKED:
        stack.wait(lambda tag=tag: _occurrence(stack, tag).status.value == "cancelled",
                   timeout=90, what=f"{tag}: cancelled in the kernel")  # fmt: skip
        run = _occurrence(stack, tag)
        reasons = [json.dumps(e.data) for e in stack.kernel.events(occurrence_id=run.id, limit=50)]
        assert any("revoke:" in reason for reason in reasons), reasons


def _revoke_held_calls(stack: Stack, side: Side) -> dict[str, str]:
    """``side``'s worker started, its held calls and a long call made, each revoke sent
    before the held calls' eta; the calls' task ids by tag."""
    side.start_worker()
    # The eta leaves room for the revokes (a `celery control` process among them) on a
    # loaded machine; they must all land before it.
    held = [("record", tag, {**options, "eta_in": REVOKE_WINDOW_S})
            for tag, options in _HELD_CALLS]  # fmt: skip
    side.call(("steps", "terminated", {}), *held)
    stack.wait(lambda: side.ledger(task="steps", event="started"), timeout=60,
               what=f"{side.name}: the long call started")  # fmt: skip
    ids = {tag: side.ledger(call=tag)[0]["id"] for tag, _ in _HELD_CALLS}
    ids["terminated"] = side.ledger(call="terminated")[0]["id"]
    side.revoke("id", ids["by-id"])
    side.celery_cli("control", "revoke", ids["by-cli"])
    side.revoke("stamps", {"mon": "m-7"})
    side.revoke("id", ids["terminated"], terminate=True)
    # Called after its stamp was revoked: the worker remembers it, as Celery's does.
    side.call(("record", "late-stamp", {"stamped_headers": ["mon"], "mon": "m-7"}))
    ids["late-stamp"] = side.ledger(call="late-stamp")[0]["id"]
    assert _since_call(side, "kept") < REVOKE_WINDOW_S, "the revokes came after the eta"
    return ids


def _state(client: Any, task_id: str) -> str | None:
    stored = client.get(f"celery-task-meta-{task_id}")
    return None if stored is None else json.loads(stored)["status"]
