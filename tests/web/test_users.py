"""``kernel users add|list|remove`` and the users file they keep."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from celery.bin.celery import celery as celery_main
from click.testing import CliRunner

from celery_app.web.users import Role, UserStore


def _cli(users_file: Path, *args: str) -> tuple[int, str]:
    runner = CliRunner(env={"KERNEL_USERS_FILE": str(users_file)})
    done = runner.invoke(celery_main, ["-A", "celery_app", "kernel", "users", *args])
    return done.exit_code, done.stdout + done.stderr


def test_add_prints_the_token_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    users_file = tmp_path / "users.json"
    code, out = _cli(users_file, "add", "alice", "--role", "operator", "--json")
    assert code == 0, out
    made = json.loads(out)
    assert set(made) == {"user", "role", "token"}
    assert (made["user"], made["role"]) == ("alice", "operator")
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600
    stored = users_file.read_text()
    assert made["token"] not in stored and made["token"].split(".")[1] not in stored
    store = UserStore(users_file)
    user = store.authenticate(made["token"])
    assert user is not None and (user.name, user.role) == ("alice", Role.OPERATOR)
    assert store.authenticate(made["token"] + "x") is None
    assert store.authenticate("nonsense") is None
    assert store.login("bob", made["token"]) is None

    code, out = _cli(users_file, "add", "alice", "--role", "viewer", "--json")
    again = json.loads(out)
    assert store.authenticate(made["token"]) is None  # a new token replaces the old one
    assert store.authenticate(again["token"]).role is Role.VIEWER  # type: ignore[union-attr]


def test_list_and_remove(tmp_path: Path) -> None:
    users_file = tmp_path / "users.json"
    assert _cli(users_file, "list", "--json") == (0, "[]\n")
    _cli(users_file, "add", "bob", "--role", "admin")
    code, out = _cli(users_file, "list")
    assert code == 0 and "bob" in out and "admin" in out
    code, out = _cli(users_file, "remove", "nobody", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "NOT_FOUND"
    assert _cli(users_file, "remove", "bob", "--json") == (0, '{\n  "removed": "bob"\n}\n')
    assert UserStore(users_file).list() == []


def test_bad_names_and_roles_are_refused(tmp_path: Path) -> None:
    users_file = tmp_path / "users.json"
    code, out = _cli(users_file, "add", "a/../b", "--role", "admin", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "INVALID_ARGUMENT"
    code, out = _cli(users_file, "add", "carol", "--role", "root", "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "USAGE"
    assert not users_file.exists()


# Each process loads the real CLI, says it is ready, waits for the go (a line on stdin)
# and then runs its `kernel users ...` commands back to back.
_EDITOR = """
import sys
from celery.bin.celery import celery
print("ready", flush=True)
sys.stdin.readline()
for args in sys.argv[1:]:
    try:
        celery.main(["-A", "celery_app", "kernel", "users", *args.split(), "--json"])
    except SystemExit as done:
        assert not done.code, (args, done.code)
"""


def test_concurrent_edits_lose_no_entry(tmp_path: Path) -> None:
    """Processes released together each add users (one also removes some it added
    before): every add and remove survives, and the file stays a valid users file."""
    users_file = tmp_path / "users.json"
    for name in ("old0", "old1", "old2"):
        _cli(users_file, "add", name, "--role", "viewer")
    env = {**os.environ, "KERNEL_USERS_FILE": str(users_file)}
    jobs = [[f"add p{p}u{n} --role operator" for n in range(3)] for p in range(3)]
    jobs[0] += [f"remove old{n}" for n in range(3)]
    editors = [
        subprocess.Popen(
            [sys.executable, "-c", _EDITOR, *commands],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for commands in jobs
    ]
    try:
        for editor in editors:
            assert editor.stdout is not None and editor.stdout.readline() == "ready\n"
        for editor in editors:
            editor.stdin.write("go\n")  # type: ignore[union-attr]
            editor.stdin.flush()  # type: ignore[union-attr]
        for editor in editors:
            _, err = editor.communicate(timeout=60)
            assert editor.returncode == 0, err
    finally:
        for editor in editors:
            if editor.poll() is None:
                editor.kill()
                editor.wait()
    expected = {f"p{p}u{n}" for p in range(3) for n in range(3)}
    assert {user.name for user in UserStore(users_file).list()} == expected
    assert not list(tmp_path.glob(".users-*"))  # no temporary file left behind
