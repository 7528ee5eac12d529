"""Celery's own integration tests, stock and routed through the kernel: a table per test.

Downloads the sdist of the installed Celery from PyPI (``pip download``, kept in a
cache folder, never in the repository), takes its ``t/integration`` and runs
``test_tasks.py`` and ``test_canvas.py`` as Celery's CI does (its conftest's session
worker, prefork, ``TEST_BROKER``/``TEST_BACKEND`` on Redis), twice, each side on a
Redis of its own: "stock" as is, and "kernel" with ``celery_app.install`` on every app
the suite builds, ``KERNEL_ROUTE_TASKS='t.integration.tasks.*'``, the kernel on a
fresh SQLite file (``--postgres``: a PostgreSQL database) and a kernel Beat running.
Prints ``test | stock | kernel | reason`` (the first line of the kernel side's
failure) and the totals; ``--out`` writes it as Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout's root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.support import fresh_database, server, servers
from bench.workers import Worker

ROOT = Path(__file__).resolve().parents[1]
FILES = ("test_tasks.py", "test_canvas.py")
ROUTE = "t.integration.tasks.*"
SIDES = ("stock", "kernel")
# After the side's bound, pytest gets SIGINT and this long to write its report.
_INTERRUPT_GRACE_S = 60.0


@dataclass
class Outcome:
    status: str  # passed, failed, error, skipped
    message: str


def suite_root(cache: Path) -> Path:
    """The folder holding ``t/`` of the installed Celery's sdist, downloaded once."""
    release = version("celery")
    root = cache / f"celery-{release}"
    done = root / ".extracted"  # written last: a half extraction is done again
    if done.exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"celery-{release}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
            + ["--dest", str(cache), f"celery=={release}"],
            check=True,
            timeout=600,
        )
    with tarfile.open(archive) as tar:
        top = f"celery-{release}/"
        # Celery's pytest settings, t/'s own modules (helpers the suite imports), t/integration.
        wanted = [
            m
            for m in tar.getmembers()
            if m.name == f"{top}pyproject.toml"
            or (m.name.startswith(f"{top}t/") and m.name.count("/") == 2 and m.isfile())
            or m.name.startswith(f"{top}t/integration/")
        ]
        tar.extractall(cache, members=wanted, filter="data")
    done.touch()
    return root


@contextlib.contextmanager
def kernel_database(postgres: bool, postgres_url: str | None) -> Iterator[str]:
    if not postgres:
        with fresh_database(None, "celery-suite-") as url:
            yield url
        return
    with server("postgres", postgres_url) as pg_url, fresh_database(pg_url, "") as url:
        yield url


def run_side(side: str, root: Path, args: argparse.Namespace, workdir: Path) -> tuple[Path, str]:
    """Run pytest for one side on its own Redis; return its junit XML and, for the
    kernel side, the kernel's occurrences by status afterwards (what was routed)."""
    counts = ""
    junit = workdir / f"{side}.xml"
    redis = servers().start_redis()
    try:
        host_port = redis.url.split("//", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CELERY_", "KERNEL_", "TEST_", "SUITE_")) and k != "PYTHONPATH"
        }
        env.update(
            PYTHONPATH=os.pathsep.join([str(root), str(ROOT)]),
            TEST_BROKER=redis.url,
            TEST_BACKEND=redis.url,
            REDIS_HOST=host,
            REDIS_PORT=port,
            SUITE_TEST_TIMEOUT=str(args.timeout),
            **({} if args.reruns is None else {"SUITE_RERUNS": str(args.reruns)}),
            KERNEL_VAR_DIR=str(workdir / f"var-{side}"),
        )
        with contextlib.ExitStack() as stack:
            if side == "kernel":
                url = stack.enter_context(kernel_database(args.postgres, args.postgres_url))
                env.update(
                    SUITE_KERNEL="1",
                    KERNEL_ROUTE_TASKS=ROUTE,
                    KERNEL_DATABASE_URL=url,
                    KERNEL_BEAT_INTERVAL="0.2",
                )
                beat = Worker(workdir, env, 0, app="bench.suite_plugin", command="beat")
                stack.callback(beat.stop)
            pytest_run(side, root, args, env, junit, workdir)
            if side == "kernel":
                counts = kernel_counts(env)
    finally:
        redis.stop()
    return junit, counts


def kernel_counts(env: dict[str, str]) -> str:
    """The status table of ``kernel status``: its lines up to the first blank one."""
    argv = [sys.executable, "-m", "celery", "-A", "bench.suite_plugin", "kernel", "status"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    return "\n".join(lines[1 : lines.index("")] if "" in lines else lines[1:])


def pytest_run(
    side: str, root: Path, args: argparse.Namespace, env: dict[str, str], junit: Path, workdir: Path
) -> None:
    # Celery's fixtures (celery.contrib.pytest: pytest-celery registers it in Celery's CI).
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "celery.contrib.pytest",
        "-p",
        "bench.suite_plugin",
    ]
    argv += ["-p", "no:cacheprovider"]
    # Celery's own pytest settings (test_* classes, its markers) from its pyproject.toml.
    argv += ["-q", "-c", str(root / "pyproject.toml"), "--rootdir", str(root)]
    argv += [f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    argv += [str(root / "t" / "integration" / name) for name in args.files]
    if args.only:
        argv += ["-k", args.only]
    log_path = workdir / f"pytest-{side}.log"
    print(f"{side}: running ({log_path})", flush=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(args.side_timeout)
        except subprocess.TimeoutExpired:
            print(f"{side}: past {args.side_timeout:.0f} s, interrupting", flush=True)
            proc.send_signal(signal.SIGINT)  # pytest writes the report of what ran
            try:
                proc.wait(_INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker's pool processes
    print(f"{side}: done in {time.monotonic() - started:.0f} s", flush=True)


def outcomes(junit: Path) -> dict[str, Outcome]:
    """Per test id (``test_tasks.py::Class::test``), its outcome from the junit XML."""
    if not junit.exists():
        return {}
    found: dict[str, Outcome] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").removeprefix("t.integration.").partition(".")
        test_id = "::".join(p for p in (f"{module}.py", cls, case.get("name", "")) if p)
        status, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            child = case.find(kind)
            if child is not None:
                status = {"failure": "failed"}.get(kind, kind)
                text = child.get("message") or child.text or ""
                message = next((line for line in text.splitlines() if line.strip()), "")
                break
        if status == "error" and test_id in found:
            continue  # a teardown error after the call: the call's outcome stands
        found[test_id] = Outcome(status, message)
    return found


def table(results: dict[str, dict[str, Outcome]]) -> str:
    ids = sorted({test_id for side in results.values() for test_id in side})
    lines = [
        "| test | " + " | ".join(results) + " | reason (kernel) |",
        "|---|" + "---|" * len(results) + "---|",
    ]
    for test_id in ids:
        cells = [results[s].get(test_id, Outcome("not run", "")).status for s in results]
        kernel = results.get("kernel", {}).get(test_id)
        reason = kernel.message if kernel and kernel.status in ("failed", "error") else ""
        reason = reason.replace("|", "\\|")[:200]
        lines.append(f"| {test_id} | " + " | ".join(cells) + f" | {reason} |")
    lines += ["", "| totals | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for status in ("passed", "failed", "error", "skipped", "not run"):
        counts = [
            sum(1 for t in ids if results[s].get(t, Outcome("not run", "")).status == status)
            for s in results
        ]
        lines.append(f"| {status} | " + " | ".join(map(str, counts)) + " |")
    if set(results) == set(SIDES):
        lost = [
            t
            for t in ids
            if results["stock"].get(t, Outcome("", "")).status == "passed"
            and results["kernel"].get(t, Outcome("", "")).status != "passed"
        ]
        lines.append(f"| passed stock, not kernel | {len(lost)} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="pytest -k expression: run only the tests it selects")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per test")
    parser.add_argument(
        "--reruns",
        type=int,
        help="rerun a test Celery marks flaky at most this often, both sides (Celery's: 5)",
    )
    parser.add_argument(
        "--side-timeout", type=float, default=3600.0, help="seconds per side (then interrupted)"
    )
    parser.add_argument("--files", nargs="+", default=list(FILES), choices=FILES)
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--postgres", action="store_true", help="the kernel on PostgreSQL")
    parser.add_argument("--postgres-url", help="a running PostgreSQL server (with --postgres)")
    parser.add_argument("--out", type=Path, help="write the table as Markdown here")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "celery-kernel"
        / "celery-sdist",
        help="where the sdist is downloaded and extracted",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run folder (logs, XML)")
    args = parser.parse_args(argv)
    root = suite_root(args.cache)
    workdir = Path(tempfile.mkdtemp(prefix="celery-suite-"))
    results: dict[str, dict[str, Outcome]] = {}
    counts = ""
    for side in args.sides:
        junit, side_counts = run_side(side, root, args, workdir)
        results[side] = outcomes(junit)
        counts = counts or side_counts
    text = table(results)
    if counts:
        text += (
            f"\nThe kernel's occurrences after its side (`kernel status`):\n\n```\n{counts}\n```\n"
        )
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.keep:
        print(f"logs and XML kept in {workdir}")
    else:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
