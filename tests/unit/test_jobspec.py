"""Job spec validation (SPEC §7): every refusal names its field; equal meaning, equal digest."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime, timedelta, timezone
from enum import IntFlag
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.errors import InvalidArgument
from kernel.spec.jobspec import (
    MAX_PAYLOAD_BYTES,
    JobSpec,
    canonical_json,
    parse_duration,
    validate_job_spec,
)
from kernel.states import Delivery, Overlap

MINIMAL: dict[str, Any] = {"id": "j1", "kind": "task", "payload": {"task": "app.add"}}

#: The SPEC §7 example, verbatim.
EXAMPLE: dict[str, Any] = {
    "id": "nightly-report",
    "kind": "shell",
    "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
    "payload": {"argv": ["/usr/local/bin/report", "--daily"]},
    "enabled": True,
    "queue": "celery",
    "max_attempts": 3,
    "retry": {"backoff": "30s", "factor": 2, "max": "1h", "jitter": 0.1},
    "lease": "60s",
    "timeout": "30m",
    "overlap": "skip",
    "max_queued": 25,
    "catchup": {"policy": "all", "window": "1h"},
    "delivery": "at-least-once",
    "pool": None,
    "dst": {"gap": "shift_forward", "fold": "first"},
    "after": None,
}


def spec(**fields: Any) -> dict[str, Any]:
    """MINIMAL with top-level fields replaced; a value of ``...`` removes the field."""
    merged = {**MINIMAL, **fields}
    return {k: v for k, v in merged.items() if v is not ...}


def http(**payload: Any) -> dict[str, Any]:
    return {"kind": "http", "payload": {"url": "http://h/", **payload}}


def shell(**payload: Any) -> dict[str, Any]:
    return {"kind": "shell", "payload": {"argv": ["ls"], **payload}}


def refused_field(raw: Any) -> str:
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec(raw)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.details["field"] == caught.value.field
    return caught.value.field


# --- defaults and normal forms ---------------------------------------------------------


def test_minimal_spec_fills_every_default() -> None:
    assert validate_job_spec(MINIMAL).to_dict() == {
        "id": "j1",
        "kind": "task",
        "payload": {"task": "app.add", "args": [], "kwargs": {}},
        "schedule": None,
        "enabled": True,
        "queue": "celery",
        "max_attempts": 3,
        "retry": {"backoff": 30.0, "factor": 2.0, "max": 3600.0, "jitter": 0.1},
        "lease": 60.0,
        "timeout": None,
        "overlap": "skip",
        "max_queued": 25,
        "catchup": {"policy": "latest", "window": None},
        "delivery": "at-least-once",
        "pool": None,
        "dst": {"gap": "shift_forward", "fold": "first"},
        "after": None,
        "kill_grace": 2.0,
        "output": {"limit": 64 * 1024, "excerpt": 2048},
    }


def test_spec_example_normalises_durations_and_payload() -> None:
    job = validate_job_spec(EXAMPLE)
    assert job.schedule == {"cron": "0 2 * * *", "timezone": "Europe/Berlin"}
    assert (job.retry.backoff_s, job.retry.max_s, job.lease_s, job.timeout_s) == (
        30.0,
        3600.0,
        60.0,
        1800.0,
    )
    assert job.catchup.window_s == 3600.0
    assert job.overlap is Overlap.SKIP and job.delivery is Delivery.AT_LEAST_ONCE
    assert job.payload == {
        "argv": ["/usr/local/bin/report", "--daily"],
        "cwd": None,
        "env": {},
        "env_allow": [],
        "secrets": {},
        "output_limit": 64 * 1024,
    }


@pytest.mark.parametrize(
    ("schedule", "normal"),
    [
        ({"cron": "*/5 * * * *"}, {"cron": "*/5 * * * *", "timezone": "UTC"}),
        ({"cron": " 0  2 * *  MON "}, {"cron": "0 2 * * MON", "timezone": "UTC"}),
        (
            {"cron": "@daily", "timezone": "Asia/Tokyo"},
            {"cron": "0 0 * * *", "timezone": "Asia/Tokyo"},
        ),
        ({"every": "1m"}, {"every": 60.0}),
        ({"every": 1}, {"every": 1.0}),
        ({"at": "2026-11-29T13:00:00+01:00"}, {"at": "2026-11-29T12:00:00Z"}),
        ({"at": "2026-11-29T12:00:00.5Z"}, {"at": "2026-11-29T12:00:00.500000Z"}),
        ({"at": datetime(2026, 11, 29, 12, tzinfo=UTC)}, {"at": "2026-11-29T12:00:00Z"}),
        ({"in": "15m"}, {"in": 900.0}),
        (None, None),
    ],
)
def test_schedule_normal_forms(schedule: Any, normal: Any) -> None:
    assert validate_job_spec(spec(schedule=schedule)).to_dict()["schedule"] == normal


@pytest.mark.parametrize(
    ("kind", "payload", "normal"),
    [
        (
            "callable",
            {"callable": "pkg.mod:Class.method", "args": (1, [2])},
            {"callable": "pkg.mod:Class.method", "args": [1, [2]], "kwargs": {}},
        ),
        (
            "shell",
            {"argv": ["sh", "-c", "printf 'a\\n'\n\techo"], "env": {"A": "x\ny"},
             "env_allow": ["TZ", "LANG", "TZ"], "cwd": "/tmp", "output_limit": 10},
            {"argv": ["sh", "-c", "printf 'a\\n'\n\techo"], "env": {"A": "x\ny"},
             "env_allow": ["LANG", "TZ"], "cwd": "/tmp", "secrets": {}, "output_limit": 10},
        ),
        (
            "http",
            {"method": "post", "url": "https://example.com/hook", "json": {"a": [1, None]}},
            {"method": "POST", "url": "https://example.com/hook", "headers": {},
             "secret_headers": {}, "json": {"a": [1, None]}},
        ),
        (
            "http",
            {"url": "http://127.0.0.1:8080/x", "headers": {"X-Token": ""}, "body": "a\nb"},
            {"method": "POST", "url": "http://127.0.0.1:8080/x", "headers": {"X-Token": ""},
             "secret_headers": {}, "body": "a\nb"},
        ),
        ("my.adapter", {"anything": [{"goes": True}], "t": "\ttab"},
         {"anything": [{"goes": True}], "t": "\ttab"}),
    ],
)  # fmt: skip
def test_payload_normal_forms(kind: str, payload: dict[str, Any], normal: dict[str, Any]) -> None:
    assert validate_job_spec(spec(kind=kind, payload=payload)).payload == normal


def test_after_defaults_and_condition() -> None:
    job = validate_job_spec(spec(after={"job": "parent", "condition": "regex:^ok\\b"}))
    assert job.to_dict()["after"] == {
        "job": "parent",
        "on": "success",
        "delay": 0.0,
        "condition": "regex:^ok\\b",
    }
    later = validate_job_spec(spec(after={"job": "p", "on": "complete", "delay": "5m"}))
    assert (later.after is not None) and (later.after.on, later.after.delay_s) == (
        "complete",
        300.0,
    )


# --- refusals: each names its field ----------------------------------------------------

REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"id": ...}, "id"),
    ({"kind": ...}, "kind"),
    ({"payload": ...}, "payload"),
    ({"bogus": 1}, "bogus"),
    ({"id": ""}, "id"),
    ({"id": "-lead"}, "id"),
    ({"id": "a" * 129}, "id"),
    ({"id": 7}, "id"),
    ({"id": "a b"}, "id"),
    ({"id": "a\x00"}, "id"),
    ({"kind": "Task"}, "kind"),
    ({"kind": "k" * 65}, "kind"),
    ({"payload": ["task"]}, "payload"),
    ({"enabled": 1}, "enabled"),
    ({"enabled": None}, "enabled"),
    ({"queue": ""}, "queue"),
    ({"queue": "q" * 65}, "queue"),
    ({"queue": "a\tb"}, "queue"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 1001}, "max_attempts"),
    ({"max_attempts": True}, "max_attempts"),
    ({"max_attempts": 2.0}, "max_attempts"),
    ({"retry": None}, "retry"),
    ({"retry": ["30s"]}, "retry"),
    ({"retry": {"backoff": "soon"}}, "retry.backoff"),
    ({"retry": {"backoff": 0}}, "retry.backoff"),
    ({"retry": {"factor": 0.5}}, "retry.factor"),
    ({"retry": {"factor": True}}, "retry.factor"),
    ({"retry": {"factor": math.nan}}, "retry.factor"),
    ({"retry": {"jitter": 1.5}}, "retry.jitter"),
    ({"retry": {"jitter": -0.1}}, "retry.jitter"),
    ({"retry": {"max": "10s"}}, "retry.max"),
    ({"retry": {"limit": 3}}, "retry.limit"),
    ({"lease": "4s"}, "lease"),
    ({"lease": "25h"}, "lease"),
    ({"lease": 0}, "lease"),
    ({"lease": True}, "lease"),
    ({"lease": "\uff16\uff10"}, "lease"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": "-1s"}, "timeout"),
    ({"timeout": math.inf}, "timeout"),
    ({"overlap": "SKIP"}, "overlap"),
    ({"overlap": "never"}, "overlap"),
    ({"max_queued": 0}, "max_queued"),
    ({"max_queued": 10001}, "max_queued"),
    ({"catchup": {"policy": "some"}}, "catchup.policy"),
    ({"catchup": {"window": 0}}, "catchup.window"),
    ({"catchup": {"since": "1h"}}, "catchup.since"),
    ({"delivery": "exactly-once"}, "delivery"),
    ({"pool": ""}, "pool"),
    ({"pool": "a b"}, "pool"),
    ({"pool": 3}, "pool"),
    ({"dst": {"gap": "first"}}, "dst.gap"),
    ({"dst": {"fold": "second"}}, "dst.fold"),
    ({"dst": {"zone": "UTC"}}, "dst.zone"),
    ({"after": "parent"}, "after"),
    ({"after": {"on": "success"}}, "after.job"),
    ({"after": {"job": "j1"}}, "after.job"),
    ({"after": {"job": "bad id"}}, "after.job"),
    ({"after": {"job": "p", "on": "done"}}, "after.on"),
    ({"after": {"job": "p", "delay": -1}}, "after.delay"),
    ({"after": {"job": "p", "condition": "startswith:x"}}, "after.condition"),
    ({"after": {"job": "p", "condition": "contains:"}}, "after.condition"),
    ({"after": {"job": "p", "condition": "regex:("}}, "after.condition"),
    ({"after": {"job": "p", "condition": "contains:a\x1b"}}, "after.condition"),
    ({"after": {"job": "p", "when": "always"}}, "after.when"),
    ({"schedule": {}}, "schedule"),
    ({"schedule": "0 2 * * *"}, "schedule"),
    ({"schedule": {"cron": "* * * * *", "every": 5}}, "schedule"),
    ({"schedule": {"cron": "* * * * * *"}}, "schedule.cron"),
    ({"schedule": {"cron": "* * * *"}}, "schedule.cron"),
    ({"schedule": {"cron": "61 * * * *"}}, "schedule.cron"),
    ({"schedule": {"cron": "0 0 30 2 *"}}, "schedule.cron"),
    ({"schedule": {"cron": "R * * * *"}}, "schedule.cron"),
    ({"schedule": {"cron": "0 H * * *"}}, "schedule.cron"),
    ({"schedule": {"cron": "@reboot"}}, "schedule.cron"),
    ({"schedule": {"cron": 5}}, "schedule.cron"),
    ({"schedule": {"cron": "0 2 * * *", "timezone": "Mars/Olympus"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 2 * * *", "timezone": "localtime"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 2 * * *", "timezone": "../etc/passwd"}}, "schedule.timezone"),
    ({"schedule": {"cron": "0 2 * * *", "timezone": ""}}, "schedule.timezone"),
    ({"schedule": {"every": 5, "timezone": "UTC"}}, "schedule.timezone"),
    ({"schedule": {"every": "0.5s"}}, "schedule.every"),
    ({"schedule": {"at": "2026-11-29T12:00:00"}}, "schedule.at"),
    ({"schedule": {"at": datetime(2026, 11, 29)}}, "schedule.at"),
    ({"schedule": {"at": "tomorrow"}}, "schedule.at"),
    ({"schedule": {"at": "0001-01-01T00:00:00+01:00"}}, "schedule.at"),
    ({"schedule": {"in": 0}}, "schedule.in"),
    ({"schedule": {"cron": "* * * * *", "jitter": 60}}, "schedule.jitter"),
    ({"schedule": {"every": 60, "start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}},
     "schedule.end"),  # fmt: skip
    ({"schedule": {"at": "2026-11-29T12:00:00Z", "max_runs": 2}}, "schedule.max_runs"),
    # payloads: JSON-ness, control characters, size
    ({"kind": "x", "payload": {"s": {1, 2}}}, "payload.s"),
    ({"kind": "x", "payload": {"n": [1.0, math.nan]}}, "payload.n[1]"),
    ({"kind": "x", "payload": {"k": [0, "a\x00"]}}, "payload.k[1]"),
    ({"kind": "x", "payload": {"k": "a\rb"}}, "payload.k"),
    ({"kind": "x", "payload": {"a\nb": 1}}, 'payload["a\\nb"]'),
    ({"kind": "x", "payload": {"d": {1: "int key"}}}, "payload.d"),
    ({"kind": "x", "payload": {"s": "\ud800"}}, "payload.s"),
    ({"kind": "x", "payload": {"blob": "x" * MAX_PAYLOAD_BYTES}}, "payload"),
    ({"kind": "x", "payload": {"big": 10**5000}}, "payload"),
    # task / callable
    ({"payload": {}}, "payload.task"),
    ({"payload": {"task": ""}}, "payload.task"),
    ({"payload": {"task": "t", "args": {}}}, "payload.args"),
    ({"payload": {"task": "t", "kwargs": []}}, "payload.kwargs"),
    ({"payload": {"task": "t", "queue": "q"}}, "payload.queue"),
    ({"kind": "callable", "payload": {"callable": "pkg.mod"}}, "payload.callable"),
    ({"kind": "callable", "payload": {"callable": "pkg.mod:1f"}}, "payload.callable"),
    ({"kind": "callable", "payload": {"task": "t"}}, "payload.task"),
    # shell
    ({"kind": "shell", "payload": {"argv": []}}, "payload.argv"),
    ({"kind": "shell", "payload": {"argv": "ls -l"}}, "payload.argv"),
    ({"kind": "shell", "payload": {"argv": ["ls", 3]}}, "payload.argv[1]"),
    ({"kind": "shell", "payload": {"argv": ["", "x"]}}, "payload.argv[0]"),
    ({"kind": "shell", "payload": {"argv": ["ls", "a\x00"]}}, "payload.argv[1]"),
    (shell(cwd=""), "payload.cwd"),
    (shell(env={"A-B": "1"}), "payload.env.A-B"),
    (shell(env={"A": 1}), "payload.env.A"),
    (shell(env=["A"]), "payload.env"),
    (shell(env_allow=["1X"]), "payload.env_allow[0]"),
    (shell(env={"A": "x"}, env_allow=["A"]), "payload.env_allow[0]"),
    (shell(output_limit=0), "payload.output_limit"),
    (shell(output_limit=10 * 2**20 + 1), "payload.output_limit"),
    (shell(shell=True), "payload.shell"),
    # http
    ({"kind": "http", "payload": {"method": "GET"}}, "payload.url"),
    ({"kind": "http", "payload": {"url": "ftp://example.com/"}}, "payload.url"),
    ({"kind": "http", "payload": {"url": "http://"}}, "payload.url"),
    ({"kind": "http", "payload": {"url": "http://[::1"}}, "payload.url"),
    ({"kind": "http", "payload": {"url": "http://a b/"}}, "payload.url"),
    ({"kind": "http", "payload": {"url": "http://h:0/"}}, "payload.url"),
    (http(method="TRACE"), "payload.method"),
    (http(headers={"X Y": "1"}), 'payload.headers["X Y"]'),
    (http(headers={"X": "a\nb"}), "payload.headers.X"),
    (http(headers={"X": 1}), "payload.headers.X"),
    (http(headers={"X-A": "1", "x-a": "2"}), "payload.headers.x-a"),
    (http(json={}, body=""), "payload.body"),
    (http(body={"a": 1}), "payload.body"),
    (http(timeout=5), "payload.timeout"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "field"), REFUSALS, ids=[f for _, f in REFUSALS])
def test_refusal_names_the_field(fields: dict[str, Any], field: str) -> None:
    assert refused_field(spec(**fields)) == field


@pytest.mark.parametrize("raw", [None, [], "job", 5])
def test_a_spec_must_be_an_object(raw: Any) -> None:
    assert refused_field(raw) == "spec"


def test_unknown_fields_are_all_named() -> None:
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec(spec(zeta=1, alpha=2))
    assert caught.value.field == "alpha"
    assert caught.value.details["unknown"] == ["alpha", "zeta"]


def test_deep_payload_is_refused_at_its_path() -> None:
    nested: Any = "leaf"
    for _ in range(70):
        nested = [nested]
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec(spec(kind="x", payload={"n": nested}))
    assert caught.value.field == "payload.n" + "[0]" * 64
    assert "nests deeper" in caught.value.message


# --- durations and canonical JSON ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30s", 30.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        (45, 45.0),
        (2.5, 2.5),
        ("10", 10.0),  # a bare number is seconds, as text (a setting) as well as a number
        ("0.5", 0.5),
        (timedelta(minutes=2), 120.0),
    ],
)
def test_parse_duration_accepts(value: object, seconds: float) -> None:
    assert parse_duration(value, "lease") == seconds


@pytest.mark.parametrize(
    "value",
    ["", "1e3", "10.", "\uff11\uff10s", "\uff11\uff10", "\u0661s",
     "5x", "-5s", " 5s", "5 s", "s", True, None, [5], 0, -1, "0s", math.nan, math.inf,
     10**400, -(10**400), "99999999999d", timedelta(0)],
)  # fmt: skip
def test_parse_duration_refuses(value: object) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_duration(value, "retry.backoff")
    assert caught.value.field == "retry.backoff"


def test_parse_duration_zero_only_when_allowed() -> None:
    assert parse_duration("0s", "after.delay", allow_zero=True) == 0.0
    with pytest.raises(InvalidArgument):
        parse_duration(-1, "after.delay", allow_zero=True)


class _Flag(IntFlag):
    A = 1
    B = 2


def test_canonical_json_is_sorted_compact_and_raw_utf8() -> None:
    assert canonical_json({"b": (1, 2.5), "a": "é\n", "c": None}, "x") == (
        '{"a":"é\\n","b":[1,2.5],"c":null}'
    )
    # A flat list's text is the one its walked copy gives (an int subclass as its int).
    assert canonical_json([1, "é\n", True, None, _Flag(3)], "x") == '[1,"é\\n",true,null,3]'


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"k": [1, {2, 3}]}, "x.k[1]"),
        ({"k": b"bytes"}, "x.k"),
        ({"k": math.inf}, "x.k"),
        ({1: "v"}, "x"),
        ({"k": "\udc80"}, "x.k"),
        (10**5000, "x"),
        # A flat list of scalars (a run's arguments) is encoded without a copy: refused alike.
        ([1, "ok", "\udc80"], "x[2]"),
        ([None, math.nan], "x[1]"),
        ([True, 10**5000], "x"),
        ([1, {2}], "x[1]"),
    ],
    ids=[
        "set",
        "bytes",
        "infinity",
        "int-key",
        "surrogate",
        "huge-int",
        "flat-surrogate",
        "flat-nan",
        "flat-huge-int",
        "flat-set",
    ],
)
def test_canonical_json_refuses_non_json(value: object, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        canonical_json(value, "x")
    assert caught.value.field == field


# --- digest and round trip -------------------------------------------------------------

EQUIVALENT: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {"lease": "60s"}),
    ({"lease": 60}, {"lease": "1m"}),
    ({"lease": 90}, {"lease": "1m30s"}),
    ({}, {"retry": {"factor": 2, "backoff": 30}}),
    ({"schedule": {"every": "1h"}}, {"schedule": {"every": 3600}}),
    ({"schedule": {"cron": "0 2 * * *"}}, {"schedule": {"cron": "0  2 * * *", "timezone": "UTC"}}),
    ({"schedule": {"at": "2026-11-29T12:00:00Z"}},
     {"schedule": {"at": "2026-11-29T07:00:00-05:00"}}),
    ({"payload": {"task": "t"}}, {"payload": {"task": "t", "args": [], "kwargs": {}}}),
    (http(), http(method="get", headers={})),
    (shell(env_allow=["B", "A"]), shell(env_allow=["A", "B", "A"])),
    ({}, {"after": None, "pool": None, "timeout": None, "enabled": True}),
]  # fmt: skip


@pytest.mark.parametrize(("left", "right"), EQUIVALENT)
def test_equivalent_specs_share_a_digest(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert validate_job_spec(spec(**left)).digest == validate_job_spec(spec(**right)).digest


@pytest.mark.parametrize(
    "change",
    [{"lease": 61}, {"enabled": False}, {"payload": {"task": "t", "args": [1]}}, {"id": "j2"}],
)
def test_a_real_change_changes_the_digest(change: dict[str, Any]) -> None:
    assert validate_job_spec(spec(**change)).digest != validate_job_spec(spec(lease=60)).digest


def test_digest_is_sha256_of_canonical_to_dict() -> None:
    job = validate_job_spec(EXAMPLE)
    canonical = canonical_json(job.to_dict(), "spec").encode()
    assert job.digest == hashlib.sha256(canonical).hexdigest()
    assert job.digest == validate_job_spec(json.loads(json.dumps(EXAMPLE))).digest


@pytest.mark.parametrize(
    "raw",
    [
        MINIMAL,
        EXAMPLE,
        spec(
            kind="http",
            payload={"url": "https://h/x", "headers": {"A": "b"}, "json": [1]},
            after={"job": "up", "on": "failure", "delay": "1m", "condition": "contains:err"},
            catchup={"policy": "all", "window": "2h"},
            pool="db",
            overlap="queue",
            delivery="at-most-once",
        ),
        spec(schedule={"cron": "30 2 * * *"}, dst={"gap": "skip", "fold": "both"}),
    ],
)
def test_round_trip_and_to_dict_is_a_valid_spec(raw: dict[str, Any]) -> None:
    job = validate_job_spec(raw)
    stored = json.loads(json.dumps(job.to_dict()))
    assert JobSpec.from_dict(stored) == job
    assert validate_job_spec(stored) == job


def test_to_dict_hands_out_copies() -> None:
    job = validate_job_spec(spec(payload={"task": "t", "args": [1]}))
    job.to_dict()["payload"]["args"].append(2)
    assert job.payload["args"] == [1]


def test_timezone_aware_at_input_with_fixed_offset() -> None:
    moment = datetime(2026, 3, 29, 3, 30, tzinfo=timezone(timedelta(hours=2)))
    job = validate_job_spec(spec(schedule={"at": moment}))
    assert job.schedule == {"at": "2026-03-29T01:30:00Z"}


# --- property: nothing but InvalidArgument escapes -------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_cron_text = st.lists(
    st.sampled_from(["*", "0", "5", "*/5", "1-3", "L", "W", "1W", "#", "?", "mon", "jan", "R",
                     "H", ",", "/", "-", "60", "7", "@daily", "5#2", "*/0", "2-1", "\t"]),
    min_size=1, max_size=7,
).map(" ".join)  # fmt: skip
_interesting = st.sampled_from(
    ["30s", "1h30m", "0s", "1d", "UTC", "Europe/Berlin", "2026-11-29T12:00:00Z", "skip", "all",
     "first", "regex:[", "contains:x", "task", "shell", "http", "callable", "j1", "http://h/"]
)  # fmt: skip
_value = _json | _interesting | _cron_text
_sections = {
    "schedule": ("cron", "timezone", "every", "at", "in", "start", "end", "max_runs", "jitter"),
    "retry": ("backoff", "factor", "max", "jitter"),
    "catchup": ("policy", "window"),
    "dst": ("gap", "fold"),
    "after": ("job", "on", "delay", "condition"),
    "payload": ("task", "callable", "args", "kwargs", "argv", "cwd", "env", "env_allow",
                "output_limit", "secrets", "method", "url", "headers", "secret_headers",
                "json", "body"),
}  # fmt: skip
_TOP = tuple(EXAMPLE)  # the SPEC example spells out every field


@st.composite
def _specs(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = dict(draw(st.sampled_from([MINIMAL, EXAMPLE, http()])))
    for name in draw(st.lists(st.sampled_from(_TOP), max_size=4)):
        keys = _sections.get(name)
        if keys is None or draw(st.booleans()):
            raw[name] = draw(_value)
        else:
            raw[name] = draw(st.dictionaries(st.sampled_from(keys), _value, max_size=4))
    return raw


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(_specs() | st.dictionaries(st.text(max_size=8), _value, max_size=5))
def test_random_input_only_ever_raises_invalid_argument(raw: dict[str, Any]) -> None:
    try:
        job = validate_job_spec(raw)
    except InvalidArgument as exc:
        assert exc.field
        return
    # Whatever passes is a fixed point: its stored form validates to itself.
    assert validate_job_spec(job.to_dict()) == job
    assert JobSpec.from_dict(json.loads(canonical_json(job.to_dict(), "spec"))) == job


@settings(max_examples=200, deadline=None, database=None)
@given(st.one_of(_json, st.text(max_size=20), st.timedeltas()))
def test_random_durations_only_ever_raise_invalid_argument(value: object) -> None:
    try:
        seconds = parse_duration(value, "lease")
    except InvalidArgument:
        return
    assert seconds > 0 and math.isfinite(seconds)
