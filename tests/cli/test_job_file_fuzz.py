"""Fuzz ``kernel jobs apply FILE`` with generated job files (hypothesis).

Each file is JSON, YAML or TOML text: valid jobs, valid jobs with one field gone wrong,
jobs of random fields, and text that is no job file at all. Whatever it holds,
``jobs apply`` either applies every job of the file (exit 0, each job at the revision
it reports) or refuses it with a message (exit 1 or 2, nothing written: jobs and pools
exactly as before); a traceback (any exception escaping the command) fails the test.

``KERNEL_FUZZ_EXAMPLES`` sets the number of files (default 150, ~15 s); a longer run::

    KERNEL_FUZZ_EXAMPLES=3000 .venv/bin/python -m pytest -p no:randomly --timeout 0 -s \\
        tests/cli/test_job_file_fuzz.py
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel import Kernel

#: Set, it also draws new examples each run; unset, the suite sees the same ones each time.
EXAMPLES = int(os.environ.get("KERNEL_FUZZ_EXAMPLES", "150"))

_junk = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_durations = st.sampled_from(
    ["30s", "1h", "1h30m", "7d", "0s", "-1s", "1e400s", "", "90", 0, -5, 1e400, 10**30]
) | st.integers(-(10**6), 10**9)
_times = st.sampled_from(
    [
        "2030-01-01T09:00:00+01:00",
        "2026-12-01T09:00:00Z",
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00+14:00",
        "2030-02-30T00:00:00Z",
        "not a time",
    ]
)
_schedules = st.one_of(
    st.none(),
    st.fixed_dictionaries({"every": _durations}),
    st.fixed_dictionaries({"in": _durations}),
    st.fixed_dictionaries({"at": _times}),
    st.fixed_dictionaries(
        {
            "cron": st.sampled_from(
                ["0 2 * * *", "*/5 * * * *", "61 * * * *", "* * *", "0 0 31 2 *"]
            )
        },
        optional={
            "timezone": st.sampled_from(["UTC", "Europe/Berlin", "Mars/Olympus", ""]),
            "day_match": st.sampled_from(["all", "any", 3]),
        },
    ),
    _junk,
)
_payloads = st.one_of(
    st.fixed_dictionaries(
        {"callable": st.sampled_from(["os.path:join", "os:nope", "no.such.module:f", ":"])},
        optional={"args": st.lists(_junk, max_size=3), "kwargs": _junk},
    ),
    st.fixed_dictionaries({"argv": st.lists(st.text(max_size=8), max_size=3)}),
    st.fixed_dictionaries({"url": st.sampled_from(["http://127.0.0.1:9/x", "ftp://x", ""])}),
    st.fixed_dictionaries({"task": st.sampled_from(["celery_app.tasks.noop", "", "x.y"])}),
    _junk,
)
_ids = st.sampled_from(["a", "b", "c", "chain-child"]) | st.text(max_size=30)
_optional_fields: dict[str, Any] = {
    "schedule": _schedules,
    "overlap": st.sampled_from(["skip", "allow", "queue", "replace", "sometimes"]) | _junk,
    "max_queued": st.integers(-3, 10**12) | _junk,
    "retry": st.fixed_dictionaries(
        {}, optional={"backoff": _durations, "factor": _junk | st.floats(), "max": _durations}
    )
    | _junk,
    "max_attempts": st.integers(-3, 10**12) | _junk,
    "lease": _durations,
    "timeout": _durations,
    "kill_grace": _durations,
    "output": st.fixed_dictionaries(
        {}, optional={"limit": st.integers(-1, 10**12), "excerpt": st.integers(-1, 10**9)}
    )
    | _junk,
    "delivery": st.sampled_from(["at-least-once", "at-most-once", "twice"]),
    "catchup": st.fixed_dictionaries(
        {},
        optional={"policy": st.sampled_from(["latest", "all", "none", "x"]), "window": _durations},
    ),
    "dst": st.fixed_dictionaries(
        {},
        optional={
            "gap": st.sampled_from(["shift_forward", "skip", "x"]),
            "fold": st.sampled_from(["first", "last", "both", "x"]),
        },
    ),
    "after": st.fixed_dictionaries(
        {"job": _ids},
        optional={"on": st.sampled_from(["succeeded", "failed", "x"]), "delay": _durations},
    )
    | _junk,
    "budget": st.sampled_from(["shared", "missing"])
    | st.fixed_dictionaries({"window": _durations}, optional={"max_runs": st.integers(-1, 10**6)}),
    "approval": st.fixed_dictionaries({"required": st.booleans()}, optional={"timeout": _durations})
    | _junk,
    "ttl": _durations,
    "delete_after_run": st.booleans() | _junk,
    "pool": st.sampled_from(["p", "q"]) | _junk,
    "note": _junk,
}
_valid_fields: dict[str, Any] = {
    "schedule": st.sampled_from(
        [
            {"every": "30s"},
            {"every": 3600},
            {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
            {"at": "2030-01-01T09:00:00+01:00"},
            {"in": "15m"},
            None,
        ]
    ),
    "overlap": st.sampled_from(["skip", "allow", "queue", "replace"]),
    "max_queued": st.integers(1, 5),
    "retry": st.just({"backoff": "30s", "factor": 2, "max": "1h", "jitter": 0.1}),
    "max_attempts": st.integers(1, 5),
    "lease": st.sampled_from(["60s", 120]),
    "timeout": st.sampled_from(["30m", 60]),
    "output": st.just({"limit": 65536, "excerpt": 2048}),
    "delivery": st.sampled_from(["at-least-once", "at-most-once"]),
    "catchup": st.just({"policy": "latest", "window": "1h"}),
    "dst": st.just({"gap": "shift_forward", "fold": "first"}),
    "ttl": st.just("7d"),
}
_valid_jobs = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["a", "b", "c"]),
        "kind": st.just("callable"),
        "payload": st.just({"callable": "os.path:join", "args": ["a"]}),
    },
    optional=_valid_fields,
)
_wild_jobs = st.fixed_dictionaries(
    {
        "id": _ids,
        "kind": st.sampled_from(["callable", "shell", "http", "task", "nope"])
        | st.text(max_size=6),
        "payload": _payloads,
    },
    optional=_optional_fields,
)
_wild_fields = {"id": _ids, "kind": _junk, "payload": _payloads, **_optional_fields}
#: A valid job with one field gone wrong: each refusal path, one at a time.
_mutated_jobs = _valid_jobs.flatmap(
    lambda job: st.sampled_from(sorted(_wild_fields)).flatmap(
        lambda name: _wild_fields[name].map(lambda value: {**job, name: value})
    )
)
_jobs = st.one_of(_valid_jobs, _mutated_jobs, _wild_jobs)
_documents = st.one_of(
    st.fixed_dictionaries(
        {"jobs": st.lists(_jobs, max_size=4)},
        optional={
            "pools": st.dictionaries(
                st.sampled_from(["p", "q", ""]),
                st.fixed_dictionaries({"limit": st.integers(-1, 10**12) | _junk}),
                max_size=2,
            ),
            "budgets": st.dictionaries(
                st.sampled_from(["shared", ""]),
                st.fixed_dictionaries({"window": _durations, "max_runs": st.integers(-1, 100)}),
                max_size=1,
            ),
        },
    ),
    _junk,
)


def _toml(document: Any) -> str:
    """TOML for the documents TOML can hold (tables of jobs); others as inline junk."""

    def value(item: Any) -> str:
        if isinstance(item, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(v)}" for k, v in item.items()) + "}"
        if isinstance(item, list):
            return "[" + ", ".join(value(v) for v in item) + "]"
        if item is None:
            return '""'  # TOML has no null: the kernel sees an empty string
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, float) and item != item:
            return "nan"
        if isinstance(item, float) and item in (float("inf"), float("-inf")):
            return "inf" if item > 0 else "-inf"
        return json.dumps(item)

    if not isinstance(document, dict):
        return f"jobs = {value(document)}\n"
    return "".join(f"{json.dumps(k)} = {value(v)}\n" for k, v in document.items())


_files = st.one_of(
    st.tuples(st.just("json"), _documents.map(lambda d: json.dumps(d))),
    st.tuples(st.just("yaml"), _documents.map(lambda d: yaml.safe_dump(d))),
    st.tuples(st.just("toml"), _documents.map(_toml)),
    st.tuples(st.sampled_from(["json", "yaml", "toml", "txt"]), st.text(max_size=200)),
)


def _state(kernel: Kernel) -> tuple[Any, ...]:
    jobs = {
        job.id: (job.revision, job.enabled, json.dumps(job.spec, sort_keys=True, default=str))
        for job in kernel.list_jobs()
    }
    pools = sorted((pool.name, pool.limit) for pool in kernel.pools())
    return jobs, pools


@pytest.mark.timeout(900)
def test_a_job_file_is_applied_whole_or_refused_with_a_message(
    cli: Any, kernel: Kernel, tmp_path: Path
) -> None:
    outcomes: Counter[str] = Counter()

    @given(file=_files)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize="KERNEL_FUZZ_EXAMPLES" not in os.environ,
        suppress_health_check=list(HealthCheck),
    )
    def apply(file: tuple[str, str]) -> None:
        suffix, text = file
        path = tmp_path / f"jobs.{suffix}"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        before = _state(kernel)
        result = cli("jobs", "apply", str(path), "--json")  # an escaping exception fails here
        assert "Traceback" not in result.out + result.err, result.out + result.err
        if result.code == 0:
            report = result.json()
            for job in report["jobs"]:
                assert kernel.get_job(job["id"]).revision == job["revision"], report
            outcomes["applied"] += 1
        else:
            assert result.code in (1, 2), (result.code, result.out, result.err)
            error = result.json()["error"]
            assert error["code"] and error["message"], error
            assert _state(kernel) == before, f"refused ({error['code']}) yet written"
            outcomes[f"refused {error['code']}"] += 1

    apply()
    print(f"jobs apply: {sum(outcomes.values())} files: {dict(sorted(outcomes.items()))}")
    assert outcomes["applied"] > 0, outcomes
