"""Helpers shared by the console and API tests (fixtures live in ``conftest.py``)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import unescape
from pathlib import Path
from typing import Any

import httpx
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner
from integration.stack import Proc, wait_until

from kernel import Kernel
from kernel.testing import ManualClock

__all__ = [
    "CSRF",
    "ROLES",
    "Web",
    "users_cli",
    "console_login",
    "hidden_fields",
    "make_users",
    "serve",
    "server_env",
    "start_web",
    "stop",
]

ROLES = ("viewer", "operator", "admin")
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
_NONCE = re.compile(r'name="nonce" value="([^"]+)"')
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def users_cli(users_file: Path, *args: str) -> Any:
    """``celery -A celery_app kernel users ARGS --json``, the real CLI run in-process."""
    runner = CliRunner(env={"KERNEL_USERS_FILE": str(users_file)})
    done = runner.invoke(celery_main, ["-A", "celery_app", "kernel", "users", *args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def make_users(users_file: Path) -> dict[str, str]:
    """One user per role, named after it; their tokens."""
    tokens = {}
    for role in ROLES:
        made = users_cli(users_file, "add", role, "--role", role)
        assert (made["user"], made["role"]) == (role, role)
        tokens[role] = made["token"]
    return tokens


def start_web(name: str, cwd: Path, env: dict[str, str]) -> tuple[Proc, str]:
    """Start ``kernel web`` on a free loopback port; the process and its base URL."""
    proc = Proc(
        name,
        [sys.executable, "-m", "celery", "-A", "celery_app", "kernel", "web", "--port", "0"],
        cwd=cwd,
        env=env,
    )
    try:
        port = wait_until(lambda: _listening(proc), timeout=30, what="the web server listening")
    except AssertionError:
        proc.terminate()
        raise AssertionError(f"kernel web did not start:\n{proc.tail()}") from None
    return proc, f"http://127.0.0.1:{port}"


def _listening(proc: Proc) -> str | None:
    if proc.popen.poll() is not None:
        raise AssertionError(f"kernel web exited with {proc.popen.returncode}:\n{proc.tail()}")
    found = _LISTENING.search(proc.log())
    return found.group(1) if found else None


def stop(proc: Proc) -> None:
    proc.expected_exit = True
    proc.terminate()
    assert not proc.reap(time.monotonic() + 20), "kernel web ignored SIGTERM"


def console_login(base: str, user: str, token: str) -> httpx.Client:
    """An HTTP client logged in to the console through its login form."""
    client = httpx.Client(base_url=base, timeout=30)
    form = client.get("/login")
    nonce = _NONCE.search(form.text)
    assert nonce, form.text
    done = client.post(
        "/login", data={"name": user, "token": token, "nonce": nonce.group(1), "then": "/"}
    )
    assert done.status_code == 303, done.text
    return client


@dataclass
class Web:
    """A running ``kernel web`` over a kernel the test can also write to."""

    url: str
    kernel: Kernel
    past: Kernel  # the same database on a clock stopped in January 2026: history to prune
    tokens: dict[str, str]
    users_file: Path
    proc: Proc
    _seq: list[int] = field(default_factory=lambda: [0])

    def fresh_job(self, **fields: Any) -> str:
        """Define a new ``callable`` job (a unique id) and return its id."""
        self._seq[0] += 1
        job_id = f"j{self._seq[0]}"
        self.kernel.define_job(
            {
                "id": job_id,
                "kind": "callable",
                "payload": {"callable": "os.path:join", "args": ["a"]},
                "schedule": {"every": "1h"},
                **fields,
            }
        )
        return job_id

    def api(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def hidden_fields(html: str) -> dict[str, str]:
    """The hidden inputs of a page's forms (CSRF token, request id, evidence)."""
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', html)
    return {name: unescape(value) for name, value in found}


def server_env(root: Path, url: str, **settings: str) -> dict[str, str]:
    """The environment of a ``kernel web`` over the kernel at ``url``, its users and var
    directory under ``root``: this process's, less its Celery and kernel settings, with
    ``settings`` added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "KERNEL_"))}
    env.update(
        KERNEL_DATABASE_URL=url,
        KERNEL_USERS_FILE=str(root / "users.json"),
        KERNEL_VAR_DIR=str(root / "var"),
        **settings,
    )
    return env


@contextmanager
def serve(root: Path, **settings: str) -> Iterator[Web]:
    """A migrated SQLite kernel under ``root``, a user per role and ``kernel web`` over
    them, started with the extra environment ``settings`` (``KERNEL_WEB_...``)."""
    url = f"sqlite:///{root / 'kernel.db'}"
    env = server_env(root, url, **settings)
    kernel = Kernel.open(url, migrate_schema=True)
    past = Kernel.open(url, clock=ManualClock(datetime(2026, 1, 2, tzinfo=UTC)))
    tokens = make_users(root / "users.json")
    proc, base = start_web("web", root, env)
    try:
        yield Web(base, kernel, past, tokens, root / "users.json", proc)
    finally:
        stop(proc)
        past.close()
        kernel.close()
