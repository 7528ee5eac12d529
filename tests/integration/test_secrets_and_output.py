"""Secrets never leave the fence in clear; a run's output is kept, bounded, whatever its outcome."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner
from integration.stack import Stack
from servers import serving
from sqlalchemy.engine import make_url

from adapters.registry import load_adapters
from celery_app.held_run import LeaseKeeper
from celery_app.runtime import run_occurrence
from kernel import Kernel
from kernel.db.schema import jobs, metadata
from kernel.records import dumps, loads

_TERMINAL = ("succeeded", "dead_letter")


def run_cli(stack: Stack, *args: str) -> str:
    """``celery -A celery_app kernel ARGS`` as an operator runs it: stdout and stderr together."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "celery_app", "kernel", *args],
        cwd=stack.root,
        env=stack.env,
        timeout=60,
        capture_output=True,
        text=True,
    )
    return done.stdout + done.stderr


def run_cli_in_process(*args: str) -> str:
    """The same command run in this process (fast; the environment is the test's)."""
    result = CliRunner().invoke(celery_main, ["-A", "celery_app", "kernel", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.stdout + result.stderr


def store_in_clear(stack: Stack, job_id: str, key: str, values: dict[str, str]) -> None:
    """Put ``values`` into a job's stored ``payload[key]``, as a release that accepted
    secret-looking values in clear stored them."""
    engine = sa.create_engine(stack.database_url)
    try:
        with engine.begin() as conn:
            where = jobs.c.id == job_id
            spec = loads(conn.execute(sa.select(jobs.c.spec).where(where)).scalar_one())
            spec["payload"][key] = values
            conn.execute(sa.update(jobs).where(where).values(spec=dumps(spec)))
    finally:
        engine.dispose()


def settle(stack: Stack, *occurrence_ids: int) -> None:
    for occ_id in occurrence_ids:
        stack.wait(
            lambda o=occ_id: stack.occurrence(o).status.value in _TERMINAL,
            timeout=30,
            what=f"occurrence {occ_id} settled",
        )


def exporter_page(stack: Stack) -> str:
    """One scrape of a real ``kernel exporter``, stopped by its PID afterwards."""
    exporter = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "kernel", "exporter", "--port", "0"]
        + ["--json"],
        cwd=stack.root,
        env=stack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert exporter.stdout is not None
        url = json.loads(first_line := exporter.stdout.readline())["url"]
        with urllib.request.urlopen(url, timeout=10) as response:
            return first_line + response.read().decode()
    finally:
        exporter.terminate()
        exporter.wait(timeout=20)
        if exporter.stdout is not None:
            exporter.stdout.close()


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_a_canary_secret_appears_nowhere(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = f"canary-{uuid.uuid4().hex}"  # referred to by name: never stored
    legacy = f"legacy-{uuid.uuid4().hex}"  # stored by an old-style job: never shown
    db_password = f"dbpw-{uuid.uuid4().hex}"
    url = make_url(stack.database_url).set(password=db_password)
    stack.database_url = url.render_as_string(hide_password=False)
    stack.env["KERNEL_DATABASE_URL"] = stack.database_url
    secrets_file = stack.root / "secrets.json"
    secrets_file.write_text(json.dumps({"REPORT_TOKEN": canary}))
    stack.env["KERNEL_SECRETS_FILE"] = str(secrets_file)
    leaky = (
        'echo "token=$TOKEN pw=$API_PASSWORD"; '
        # printed in two pieces, read by the worker in two reads
        'first=${TOKEN%????????????????}; printf "split=%s" "$first"; sleep 0.5; '
        'printf "%s\\n" "${TOKEN#"$first"}"; '
        'printf %s "$TOKEN" | base64; printf "user:%s" "$TOKEN" | base64; '
        'echo "failed with $TOKEN $API_PASSWORD" >&2; exit 3'
    )
    stack.start_worker("worker")  # it migrates the database
    stack.define(
        {
            "id": "secret-shell",
            "kind": "shell",
            "queue": stack.queue,
            "max_attempts": 1,
            "payload": {"argv": ["sh", "-c", leaky], "secrets": {"TOKEN": "REPORT_TOKEN"}},
        },
        {
            "id": "secret-hook",
            "kind": "http",
            "queue": stack.queue,
            "max_attempts": 1,
            "payload": {
                "url": f"http://user:{legacy}@127.0.0.1:9/hook?token={legacy}",
                "secret_headers": {"X-Api-Key": "REPORT_TOKEN"},
                "json": {"day": "today"},
            },
        },
    )
    # Values in clear are refused at apply now; jobs stored before keep them.
    store_in_clear(stack, "secret-shell", "env", {"API_PASSWORD": legacy})
    store_in_clear(stack, "secret-hook", "headers", {"Authorization": f"Bearer {legacy}"})
    stack.start_beat("beat")
    shell_occ, hook_occ = stack.run_now("secret-shell"), stack.run_now("secret-hook")
    settle(stack, shell_occ, hook_occ)
    failed = stack.occurrence(shell_occ).last_error
    assert failed is not None and "exited with code 3" in failed["message"]
    assert "failed with *** ***" in failed["message"]  # the child had both; neither is kept

    seen: dict[str, str] = {}
    monkeypatch.chdir(stack.root)
    monkeypatch.setenv("KERNEL_DATABASE_URL", stack.database_url)
    commands: list[tuple[str, ...]] = [
        ("jobs", "list"),
        ("jobs", "show", "secret-shell"),
        ("jobs", "show", "secret-hook"),
        ("occurrences", "list"),
        ("occurrences", "show", str(shell_occ)),
        ("occurrences", "show", str(hook_occ)),
        ("occurrences", "logs", str(shell_occ)),
        ("occurrences", "logs", str(hook_occ)),
        ("events", "--limit", "1000"),
        ("status",),
        ("doctor",),
        ("why", "secret-shell"),
    ]
    for args in commands:
        for mode in ((), ("--json",)):
            seen[" ".join(args + mode)] = run_cli_in_process(*args, *mode)
    seen["exporter"] = exporter_page(stack)
    assert "token=*** pw=***" in seen[f"occurrences logs {shell_occ}"]
    assert "split=***" in seen[f"occurrences logs {shell_occ}"]
    assert "***" in seen["jobs show secret-hook"]
    stack.stop_all()
    for proc in stack.procs:
        seen[f"{proc.name} log"] = proc.log()
    assert "kernel -> postgresql+psycopg://" in seen["beat log"]  # the banner is there, masked
    engine = sa.create_engine(stack.database_url)
    try:
        with engine.connect() as conn:
            rows = [
                json.dumps([str(value) for value in row])
                for table in metadata.sorted_tables
                for row in conn.execute(sa.select(table))
            ]
    finally:
        engine.dispose()
    database = "\n".join(rows)

    printed_forms = (
        base64.b64encode(canary.encode()).decode(),
        base64.b64encode(f"user:{canary}".encode()).decode(),
    )
    assert canary not in database
    for where, text in seen.items():
        for value in (canary, legacy, db_password, *printed_forms):
            assert value not in text, f"{value[:6]}... appears in `{where}`"


def test_shell_output_is_captured_and_bounded_for_failures_and_successes(stack: Stack) -> None:
    failing = "for i in 1 2 3; do echo \"out $i\"; done; echo 'disk full on /var' >&2; exit 3"
    chatty = 'i=0; while [ $i -lt 2000 ]; do echo "line $i of chatter"; i=$((i+1)); done'
    stack.use_jobs(
        {
            "id": "fails",
            "kind": "shell",
            "queue": stack.queue,
            "max_attempts": 1,
            "payload": {"argv": ["sh", "-c", failing]},
            "output": {"excerpt": 64},
        },
        {
            "id": "chatty",
            "kind": "shell",
            "queue": stack.queue,
            "payload": {"argv": ["sh", "-c", chatty]},
            "output": {"limit": 4096, "excerpt": 100},
        },
    )
    stack.start_worker("worker")
    stack.start_beat("beat")
    fails, chats = stack.run_now("fails"), stack.run_now("chatty")
    settle(stack, fails, chats)
    assert stack.occurrence(fails).status.value == "dead_letter"

    logs: dict[str, Any] = stack.cli("occurrences", "logs", str(fails))
    streams = {(c["stream"], c["fence"]) for c in logs["output"]}
    # Each stream in its own order: the two pipes' chunks interleave as they arrive.
    stdout, stderr = (
        "".join(c["text"] for c in logs["output"] if c["stream"] == stream)
        for stream in ("stdout", "stderr")
    )
    assert {("stdout", 1), ("stderr", 1)} <= streams
    assert "out 1\nout 2\nout 3\n" in stdout and "disk full on /var\n" in stderr
    assert any("shell command started" in c["text"] for c in logs["output"] if c["stream"] == "log")
    shown = stack.cli("occurrences", "show", str(fails))
    assert "disk full on /var" in shown["output_excerpt"]
    assert len(shown["output_excerpt"].encode()) <= 64 + 3
    assert "exited with code 3" in shown["last_error"]["message"]
    assert "disk full on /var" in run_cli(stack, "occurrences", "logs", str(fails))

    chatter = stack.cli("occurrences", "logs", str(chats))["output"]
    kept = "".join(c["text"] for c in chatter if c["stream"] == "stdout")
    assert len(kept.encode()) <= 4096
    assert kept.startswith("line 0 of chatter\n") and kept.endswith("line 1999 of chatter\n")
    assert any("bytes of output not kept" in c["text"] for c in chatter if c["stream"] == "note")
    assert stack.occurrence(chats).result["exit_code"] == 0


def test_a_secret_printed_in_pieces_is_in_no_byte_of_the_database(stack: Stack) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    (stack.root / "secrets.json").write_text(json.dumps({"REPORT_TOKEN": canary}))
    stack.env["KERNEL_SECRETS_FILE"] = str(stack.root / "secrets.json")
    pieces = (
        'first=${TOKEN%????????????????}; printf "split=%s" "$first"; sleep 0.5; '
        'printf "%s\\n" "${TOKEN#"$first"}"; '
        # across the worker's 64 KiB pipe reads, and in the kept tail
        "head -c 65530 /dev/zero | tr '\\0' x; printf %s \"$TOKEN\"; "
        'printf "%s" "$TOKEN" | base64'
    )
    stack.use_jobs(
        {
            "id": "pieces",
            "kind": "shell",
            "queue": stack.queue,
            "max_attempts": 1,
            "payload": {"argv": ["sh", "-c", pieces], "secrets": {"TOKEN": "REPORT_TOKEN"}},
        }
    )
    stack.start_worker("worker")
    stack.start_beat("beat")
    occ = stack.run_now("pieces")
    settle(stack, occ)
    assert stack.occurrence(occ).status.value == "succeeded"
    seen = {
        "logs": run_cli(stack, "occurrences", "logs", str(occ)),
        "show": json.dumps(stack.cli("occurrences", "show", str(occ))),
        "events": json.dumps(stack.cli("events", "--limit", "1000")),
    }
    assert "split=***" in seen["logs"]
    stack.stop_all()
    seen.update({f"{proc.name} log": proc.log() for proc in stack.procs})
    stack.kernel.close()
    for path in (stack.root / "var").glob("kernel.db*"):
        seen[path.name] = path.read_bytes().decode("latin-1")
    assert "kernel.db" in seen
    for where, text in seen.items():
        for value in (canary, base64.b64encode(canary.encode()).decode()):
            assert value not in text, f"{value[:6]}... appears in `{where}`"


def test_a_worker_runs_only_what_its_deployment_allows(stack: Stack) -> None:
    marker = stack.root / "shell-ran"
    stack.env.update(KERNEL_ALLOWED_KINDS="callable", KERNEL_ALLOWED_CALLABLES="ledger_jobs:rec*")
    stack.start_worker("worker")  # migrates; the definitions below never went through apply
    stack.define(
        {
            "id": "cmd",
            "kind": "shell",
            "queue": stack.queue,
            "max_attempts": 3,
            "payload": {"argv": ["touch", str(marker)]},
        },
        stack.job("stubborn", "stubborn", max_attempts=3),
        stack.job("record", "record"),
    )
    stack.start_beat("beat")
    runs = {job_id: stack.run_now(job_id) for job_id in ("cmd", "stubborn", "record")}
    settle(stack, *runs.values())

    assert stack.occurrence(runs["record"]).status.value == "succeeded"
    for job_id in ("cmd", "stubborn"):
        refused = stack.occurrence(runs[job_id])
        assert refused.status.value == "dead_letter" and refused.attempt == 1  # not retried
        assert refused.last_error is not None and refused.last_error["code"] == "NOT_ALLOWED"
    assert "KERNEL_ALLOWED_KINDS" in (stack.occurrence(runs["cmd"]).last_error or {})["message"]
    assert not marker.exists()


class _EchoHeaders(BaseHTTPRequestHandler):
    """Answers every request with the headers it received, as many debugging endpoints do."""

    def do_GET(self) -> None:
        body = json.dumps(dict(self.headers)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_reply_echoing_a_secret_is_stored_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("HOOK_TOKEN", canary)
    kernel = Kernel.open(f"sqlite:///{tmp_path / 'kernel.db'}", migrate_schema=True)
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _EchoHeaders)) as server:
        kernel.define_job(
            {
                "id": "echo",
                "kind": "http",
                "payload": {
                    "url": f"http://127.0.0.1:{server.server_address[1]}/headers",
                    "secret_headers": {"X-Token": "HOOK_TOKEN"},
                },
            }
        )
        occ_id = kernel.run_now("echo", request_id="r", operator="test").occurrence.id
        outcome = run_occurrence(kernel, load_adapters(), occ_id, main_pid=0, keeper=LeaseKeeper())
    try:
        assert outcome.result == "succeeded"
        result = kernel.get_occurrence(occ_id).result
        assert result is not None and '"X-Token": "***"' in result["body"]
    finally:
        kernel.close()
    assert canary.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("kernel.db*"))
