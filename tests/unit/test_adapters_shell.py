"""The shell adapter against real child processes."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from unit.adapter_support import make_context

from adapters.base import AdapterError, Cancelled, ErrorClass
from adapters.shell import ShellAdapter
from kernel.errors import InvalidArgument
from kernel.states import Effect

PYTHON = sys.executable

# Traps SIGTERM (recording it), writes its pid, then sleeps until killed.
STUBBORN_CHILD = textwrap.dedent(
    """
    import os, pathlib, signal, sys, time
    where = pathlib.Path(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: (where / "got-term").write_text("1"))
    (where / "pid").write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)
    """
)

# Starts a grandchild that ignores SIGTERM and shares our stdout, waits for it, then exits.
LEAVES_A_GRANDCHILD = textwrap.dedent(
    """
    import pathlib, subprocess, sys, time
    where = pathlib.Path(sys.argv[1])
    grandchild = (
        "import os, pathlib, signal, sys, time;"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "pathlib.Path(sys.argv[1]).write_text(str(os.getpid()));"
        "time.sleep(60)"
    )
    subprocess.Popen([sys.executable, "-c", grandchild, str(where / "pid")])
    while not (where / "pid").exists():
        time.sleep(0.01)
    print("leaving")
    """
)


def run(payload: dict[str, Any], adapter: ShellAdapter | None = None, **context: Any) -> Any:
    return (adapter or ShellAdapter()).execute(make_context("shell", payload, **context))


def classify(
    payload: dict[str, Any], adapter: ShellAdapter | None = None, **context: Any
) -> ErrorClass:
    adapter = adapter or ShellAdapter()
    with pytest.raises((AdapterError, Cancelled)) as caught:
        adapter.execute(make_context("shell", payload, **context))
    return adapter.classify_error(caught.value)


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (killed, not yet reaped by init) counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def wait_dead(pid: int, within_s: float = 2.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_captures_stdout_and_stderr() -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr)"

    assert run({"argv": [PYTHON, "-c", code]}) == {
        "exit_code": 0,
        "stdout": "out\n",
        "stderr": "err\n",
        "truncated": False,
    }


def test_child_sees_only_the_base_the_allowed_and_the_given_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KERNEL_DATABASE_URL", "postgresql://kernel:s3cret@db/kernel")
    monkeypatch.setenv("REPORT_REGION", "eu")
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    monkeypatch.setenv("HOME", "/home/worker")
    monkeypatch.delenv("LANG", raising=False)
    env_binary = shutil.which("env")
    assert env_binary is not None

    result = run(
        {"argv": [env_binary], "env_allow": ["REPORT_REGION", "NOT_SET"], "env": {"MODE": "daily"}}
    )

    seen = dict(line.split("=", 1) for line in result["stdout"].splitlines())
    assert seen == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/home/worker",
        "REPORT_REGION": "eu",
        "MODE": "daily",
        "KERNEL_OCCURRENCE_ID": "7",
        "KERNEL_JOB_ID": "nightly",
        "KERNEL_FENCE": "1",
        "KERNEL_ATTEMPT": "1",
    }


def test_argv_is_passed_literally_without_a_shell(tmp_path: Path) -> None:
    tricky = ["$(touch pwned)", "; touch pwned2", "`id`", "a|b > c", "*", "$HOME"]

    result = run(
        {
            "argv": [
                PYTHON,
                "-c",
                "import os, sys; print(os.getcwd()); print(sys.argv[1:])",
                *tricky,
            ],
            "cwd": str(tmp_path),
        }
    )

    assert result["stdout"] == f"{tmp_path}\n{tricky}\n"
    assert list(tmp_path.iterdir()) == []


def test_timeout_sends_sigterm_then_sigkill_to_a_child_that_traps_it(tmp_path: Path) -> None:
    adapter = ShellAdapter()
    adapter.kill_grace_s = 0.5
    started = time.monotonic()

    error = classify(
        {"argv": [PYTHON, "-c", STUBBORN_CHILD, str(tmp_path)]}, adapter, timeout_s=1.0
    )

    elapsed = time.monotonic() - started
    assert (error.retryable, error.code) == (True, "TIMEOUT")
    assert "timed out after 1.0s" in error.message
    assert (tmp_path / "got-term").exists()  # SIGTERM came first ...
    assert 1.5 <= elapsed < 5  # ... and SIGKILL only after the grace
    # SIGKILL is delivered asynchronously: on a loaded machine the child may take a moment.
    assert wait_dead(int((tmp_path / "pid").read_text()), within_s=1.0)


def test_a_child_that_honours_sigterm_stops_without_waiting_for_the_grace() -> None:
    started = time.monotonic()

    error = classify({"argv": [PYTHON, "-c", "import time; time.sleep(30)"]}, timeout_s=0.3)

    assert error.code == "TIMEOUT"
    assert error.effect == Effect.UNKNOWN  # stopped mid-run: it may have done its work
    assert time.monotonic() - started < 3  # the default grace is 5 s


def test_a_command_killed_by_a_signal_left_its_effect_unknown() -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"

    error = classify({"argv": [PYTHON, "-c", code]})

    assert (error.code, error.effect) == ("SHELL_EXIT", Effect.UNKNOWN)
    assert "killed by signal SIGKILL" in error.message


def test_cancel_event_stops_the_child() -> None:
    cancelled = threading.Event()
    timer = threading.Timer(0.3, cancelled.set)
    timer.start()
    started = time.monotonic()
    try:
        error = classify(
            {"argv": [PYTHON, "-c", "import time; time.sleep(30)"]}, cancelled=cancelled
        )
    finally:
        timer.cancel()
        timer.join()

    assert (error.retryable, error.code) == (False, "CANCELLED")
    assert time.monotonic() - started < 3


def test_a_cancelled_occurrence_starts_nothing(tmp_path: Path) -> None:
    cancelled = threading.Event()
    cancelled.set()

    error = classify({"argv": ["touch", str(tmp_path / "ran")]}, cancelled=cancelled)

    assert error.code == "CANCELLED"
    assert not (tmp_path / "ran").exists()


def test_what_is_left_of_the_process_group_is_killed_when_the_command_exits(
    tmp_path: Path,
) -> None:
    started = time.monotonic()

    result = run({"argv": [PYTHON, "-c", LEAVES_A_GRANDCHILD, str(tmp_path)]})

    assert result["stdout"] == "leaving\n"
    assert time.monotonic() - started < 4  # the grandchild's open stdout did not hold us
    assert wait_dead(int((tmp_path / "pid").read_text()))


def test_output_is_bounded_to_its_tail_and_a_chatty_child_never_blocks() -> None:
    code = (
        "import sys; sys.stdout.write('x' * 1_000_000 + 'END');"
        "sys.stderr.write('y' * 300_000 + 'FIN')"
    )

    result = run({"argv": [PYTHON, "-c", code], "output_limit": 1000})

    assert result["truncated"] is True
    assert result["stdout"] == "x" * 997 + "END"
    assert result["stderr"] == "y" * 997 + "FIN"


def test_nonzero_exit_is_retryable_and_names_code_and_stderr_tail() -> None:
    code = "import sys; print('disk full on /var/reports', file=sys.stderr); sys.exit(3)"

    error = classify({"argv": [PYTHON, "-c", code]})

    assert (error.retryable, error.code) == (True, "SHELL_EXIT")
    assert error.effect == Effect.NOT_APPLIED  # it ran to its end and said it failed
    assert "exited with code 3" in error.message
    assert "disk full on /var/reports" in error.message


def test_a_missing_executable_or_directory_is_not_retryable(tmp_path: Path) -> None:
    missing_binary = classify({"argv": [str(tmp_path / "no-such-binary")]})
    missing_cwd = classify({"argv": [PYTHON, "-c", "pass"], "cwd": str(tmp_path / "gone")})

    assert (missing_binary.retryable, missing_binary.code) == (False, "SHELL_NOT_FOUND")
    assert "executable" in missing_binary.message
    assert (missing_cwd.retryable, missing_cwd.code) == (False, "SHELL_NOT_FOUND")
    assert "working directory" in missing_cwd.message


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"argv": []},
        {"argv": "ls -l /tmp"},
        {"argv": ["ls", 3]},
        {"argv": ["ls"], "env": {"N": 1}},
        {"argv": ["ls"], "output_limit": -1},
        {"argv": ["ls"], "env": {"BAD=NAME": "x"}},
        {"argv": ["env"], "env_allow": ["KERNEL_DATABASE_URL"]},
        {"argv": ["env"], "env_allow": ["CELERY_BROKER_URL"]},
        {"argv": ["env"], "secrets": {"FILE": "KERNEL_SECRETS_FILE"}},
    ],
)
def test_an_unusable_payload_is_refused_when_the_job_is_defined(payload: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        make_context("shell", payload)
    assert caught.value.field.startswith("payload")


@pytest.mark.parametrize(
    ("field", "value"),
    [("env_allow", ["KERNEL_DATABASE_URL"]), ("secrets", {"DB": "KERNEL_DATABASE_URL"})],
)
def test_a_stored_payload_passing_a_worker_setting_is_refused_on_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: Any
) -> None:
    monkeypatch.setenv("KERNEL_DATABASE_URL", "postgresql://kernel:s3cret@db/kernel")
    ran = tmp_path / "ran"
    ctx = make_context("shell", {"argv": ["touch", str(ran)]})
    ctx.occurrence.payload[field] = value  # stored before apply refused it

    with pytest.raises(AdapterError) as caught:
        ShellAdapter().execute(ctx)

    assert (caught.value.code, caught.value.retryable) == ("INVALID_PAYLOAD", False)
    assert f"payload.{field}" in caught.value.message and "worker's own" in caught.value.message
    assert not ran.exists()


def test_secrets_come_from_the_secrets_file_or_the_worker_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets_file = tmp_path / "secrets.json"
    secrets_file.write_text(json.dumps({"DB_PASSWORD": "canary-file-51"}))
    monkeypatch.setenv("KERNEL_SECRETS_FILE", str(secrets_file))
    monkeypatch.setenv("API_TOKEN", "canary-env-77")
    code = "import os; print(os.environ['PGPASSWORD'], os.environ['TOKEN'])"
    payload = {
        "argv": [PYTHON, "-c", code],
        "secrets": {"PGPASSWORD": "DB_PASSWORD", "TOKEN": "API_TOKEN"},
    }
    output: list[tuple[str, str]] = []
    ctx = make_context("shell", payload, output=output)

    result = ShellAdapter().execute(ctx)

    assert ctx.secrets >= {"canary-file-51", "canary-env-77"}
    assert result["stdout"] == "*** ***\n"  # the child got them; what it printed is masked
    assert "canary" not in json.dumps(ctx.occurrence.definition)
    assert ("stdout", "canary-file-51 canary-env-77\n") in output  # masked at the flush


def test_a_missing_secret_is_named_and_not_retryable() -> None:
    error = classify({"argv": ["true"], "secrets": {"TOKEN": "NO_SUCH_SECRET_X"}})

    assert (error.retryable, error.code) == (False, "SECRET_MISSING")
    assert "NO_SUCH_SECRET_X" in error.message


def test_output_of_both_streams_goes_to_the_run_output() -> None:
    code = "import sys; print('out'); sys.stdout.flush(); print('err', file=sys.stderr)"
    output: list[tuple[str, str]] = []

    run({"argv": [PYTHON, "-c", code]}, output=output)

    assert ("stdout", "out\n") in output and ("stderr", "err\n") in output


def test_the_supervisor_kills_the_group_at_the_lease_deadline_on_its_own(tmp_path: Path) -> None:
    # The worker thread never cancels: only the deadline it handed over stops the child.
    started = time.monotonic()

    error = classify(
        {"argv": [PYTHON, "-c", STUBBORN_CHILD, str(tmp_path)]},
        effects_deadline=started + 1.5,
        kill_grace_s=0.5,
    )

    elapsed = time.monotonic() - started
    assert error.code == "SHELL_EXIT" and "SIGKILL" in error.message
    assert (tmp_path / "got-term").exists()  # SIGTERM at deadline - grace ...
    assert 1.4 <= elapsed < 3  # ... SIGKILL at the deadline
    assert wait_dead(int((tmp_path / "pid").read_text()))


def test_a_secret_cut_by_output_limit_is_masked_before_the_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "canary-secret-abcdefghijkl"  # 26 characters, more than the 20 bytes kept
    monkeypatch.setenv("API_TOKEN", secret)
    code = "import os, sys; sys.stdout.write('x' * 40 + os.environ['TOKEN'] + '.')"
    payload = {"argv": [PYTHON, "-c", code], "secrets": {"TOKEN": "API_TOKEN"}}

    result = ShellAdapter().execute(make_context("shell", payload | {"output_limit": 20}))

    assert result["truncated"] is True
    assert result["stdout"].endswith("***.")  # the mask, cut or not, never a piece of it
    assert not any(secret[i : i + 4] in result["stdout"] for i in range(len(secret) - 3))
