"""`kernel web` serves with its startup heap out of the collector's passes.

A full collection of that heap (~200k objects) took ~100 ms, and one falling inside a request
was the console's p95 with a large history (bench/README.md, session 29).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from web.support import server_env

from kernel import Kernel
from tests.servers import free_port

# The real `kernel web` command in this process's main thread; a thread waits until it
# answers, then reports what the collector sees and ends the process.
_SERVE_AND_REPORT = """
import gc, json, os, socket, sys, threading, time, urllib.error, urllib.request
from celery.bin.celery import celery

port = sys.argv[1]

def report():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    try:  # a request served, whatever its answer
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10).read()
    except urllib.error.HTTPError:
        pass
    start = time.perf_counter()
    gc.collect()
    print(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects()),
                      "full_collection_ms": (time.perf_counter() - start) * 1000}), flush=True)
    os._exit(0)

threading.Thread(target=report, daemon=True).start()
celery(["-A", "celery_app", "kernel", "web", "--port", port])
"""


ROOT = Path(__file__).resolve().parents[2]


def test_the_server_freezes_what_it_built_before_serving(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    Kernel.open(url, migrate_schema=True).close()
    served = subprocess.run(
        [sys.executable, "-c", _SERVE_AND_REPORT, str(free_port())],
        cwd=ROOT,
        env=server_env(tmp_path, url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr
    seen = json.loads(served.stdout.strip().splitlines()[-1])
    # Celery, the kernel, FastAPI and the templates are all frozen; what is left to walk is
    # what serving and the thread made since.
    assert seen["frozen"] > 100_000, seen
    assert seen["tracked"] < seen["frozen"] // 10, seen
