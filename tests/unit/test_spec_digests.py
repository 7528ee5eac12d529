"""Digests pinned before the spec moved to pydantic models: upgrading changes no job's digest.

The values were computed by the hand-written validator this package replaced; a changed
digest would make every Beat re-revise every existing job on upgrade.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from unit.test_jobspec import EXAMPLE

from beat_schedule.jobfiles import validate_job_file
from kernel.errors import InvalidArgument
from kernel.spec.jobspec import JobSpec, validate_job_spec
from kernel.spec.payload_kinds import check_payload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SPECS: dict[str, dict[str, Any]] = {
    "minimal-task": {"id": "j1", "kind": "task", "payload": {"task": "app.add"}},
    # SPEC §7's example as written there: its catchup.window is refused since (latest).
    "spec-example": {**EXAMPLE, "catchup": {"policy": "latest", "window": "1h"}},
    "http-chained": {
        "id": "hook",
        "kind": "http",
        "payload": {
            "url": "https://h/x",
            "headers": {"A": "b"},
            "secret_headers": {"Authorization": "TOKEN"},
            "json": [1],
        },
        "after": {"job": "up", "on": "failure", "delay": "1m", "condition": "contains:err"},
        "catchup": {"policy": "all", "window": "2h"},
        "pool": "db",
        "overlap": "queue",
        "delivery": "at-most-once",
        "dst": {"gap": "skip", "fold": "both"},
    },
    "http-body": {
        "id": "b",
        "kind": "http",
        "payload": {"method": "put", "url": "http://127.0.0.1:8080/x", "body": "a\nb"},
    },
    "shell-env": {
        "id": "sh",
        "kind": "shell",
        "payload": {
            "argv": ["sh", "-c", "echo"],
            "cwd": "/tmp",
            "env": {"A": "x"},
            "env_allow": ["TZ", "LANG", "TZ"],
            "secrets": {"PW": "DB_PW"},
            "output_limit": 10,
        },
        "schedule": {"every": "1m"},
        "kill_grace": "5s",
        "lease": "30s",
        "output": {"limit": 1000, "excerpt": 100},
    },
    "cron-day-match": {
        "id": "c",
        "kind": "callable",
        "payload": {"callable": "pkg.mod:fn", "args": [1], "kwargs": {"a": 2}},
        "schedule": {"cron": "@daily", "timezone": "Asia/Tokyo", "day_match": "all"},
    },
    "cron-day-any": {
        "id": "c2",
        "kind": "task",
        "payload": {"task": "t"},
        "schedule": {"cron": "0  2 * * MON", "day_match": "any"},
    },
    "at": {
        "id": "once",
        "kind": "task",
        "payload": {"task": "t"},
        "schedule": {"at": "2026-11-29T13:00:00+01:00"},
    },
    "in": {
        "id": "soon",
        "kind": "task",
        "payload": {"task": "t"},
        "schedule": {"in": "15m"},
        "timeout": 90,
        "max_attempts": 7,
        "max_queued": 3,
        "queue": "q.1",
        "enabled": False,
    },
    "after-regex": {
        "id": "child",
        "kind": "task",
        "payload": {"task": "t"},
        "after": {"job": "parent", "condition": "regex:^ok\\b"},
        "retry": {"backoff": 5, "factor": 1.5, "max": "10m", "jitter": 0},
    },
    "custom-kind": {
        "id": "x",
        "kind": "my.adapter",
        "payload": {"anything": [{"goes": True}], "t": "\ttab"},
        "catchup": {"policy": "none"},
    },
    "timedelta": {
        "id": "td",
        "kind": "task",
        "payload": {"task": "t"},
        "schedule": {"every": timedelta(seconds=90)},
        "lease": timedelta(minutes=2),
    },
}


DIGESTS = {
    "minimal-task": "01a496761e4984142a0e595a5b23d8e637c0abdb7215116d0766372fae1a34fd",
    "spec-example": "353ba31223f3d418a4cfda5ba0c23710d00213203eefbd4604d202261c7073c4",
    "http-chained": "80c295d058e4125810b1201538c3e601030d1f88f70da984e846e8b0d8c3f8f8",
    "http-body": "84b458599611bf4c49f313f3b72c1cd4b59b06a7523480bdd332bd64a2fe1c09",
    "shell-env": "914b96e406ff295744878511061d3480132299af51118a0219b57af1e7c98d68",
    "cron-day-match": "3ed251fa2f6806740979b6cbf8c7dfaa12d0f2cf7f81af1e89dfae45d9d54b11",
    "cron-day-any": "006e8b9c1e876bc86dcfc15b4fbf0e99c3aa1de4340c39fba047d40062387ab1",
    "at": "732f31359302cd1cfb16a0e69b70779b7b462e94241da04b8662d7793edc6b71",
    "in": "75040ae2fa34fe31751b75dd0a0a495655c2ac2a5d845f4181980b804f68ed5f",
    "after-regex": "d66687dcaa97734450619c6353e0b5346e93d12a6396ca41f231144ce207424c",
    "custom-kind": "bc4dc9a150cfa5141054b8df1c84aad76b9027728b5688c3bdc575e49bddb900",
    "timedelta": "49c00326adb8228f7e827dc80ebf269d7f31f097853c20db1d7f358396534688",
}

EXAMPLE_DIGESTS = {
    "heartbeat": "266cdeb18d5abfc9819eed62c30b6175faa1cd558d78fd1ab80ae1ba14be3857",
    "count-to-ten": "bc3d9ae69aa1d82d6aece76a84cea9305cc707f700e79e18f93432145b73848f",
    "disk-usage": "3bc6291bc6acc4605731b1b12f6a74eb5123bfe2343c44536c90af793dd2fea3",
}


#: Specs stored before a setting without effect was refused: applying them again is
#: refused (naming the field), but the jobs stored keep their digest.
REFUSED_SINCE = {"spec-example": "catchup.window", "http-chained": "dst"}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_digest_is_unchanged(name: str) -> None:
    raw = SPECS[name]
    if name not in REFUSED_SINCE:
        assert validate_job_spec(raw).digest == DIGESTS[name]
        return
    with pytest.raises(InvalidArgument) as refused:
        validate_job_spec(raw)
    assert refused.value.field == REFUSED_SINCE[name]
    payload, problems = check_payload(raw["kind"], raw["payload"])
    assert problems == []
    stored = JobSpec.model_validate(raw).model_copy(update={"payload": payload})
    assert stored.digest == DIGESTS[name]


def test_example_job_file_digests_are_unchanged() -> None:
    specs = validate_job_file(EXAMPLES / "jobs.yaml")
    assert {spec.id: spec.digest for spec in specs} == EXAMPLE_DIGESTS
