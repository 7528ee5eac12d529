"""Settings that would be stored and then ignored are refused, naming the field, and the
refusal writes nothing: no job, no revision, no event (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.errors import InvalidArgument
from tests.kernel.conftest import Harness

WITHOUT_EFFECT = [
    ({"catchup": {"policy": "latest", "window": "1h"}}, "catchup.window"),
    ({"catchup": {"policy": "none", "window": "10m"}}, "catchup.window"),
    ({"overlap": "replace", "max_queued": 5}, "max_queued"),
    ({"schedule": {"every": 60}, "dst": {"gap": "skip"}}, "dst"),
    ({"schedule": {"at": "2030-01-01T00:00:00Z"}, "dst": {"fold": "both"}}, "dst"),
    ({"schedule": {"in": "1h"}, "dst": {"gap": "skip", "fold": "last"}}, "dst"),
    ({"schedule": {"cron": "0 0 30 2 mon", "day_match": "all"}}, "schedule.cron"),
    ({"schedule": {"cron": "0 0 31 4 *", "day_match": "all"}}, "schedule.cron"),
    ({"schedule": {"cron": "0 0 30 2 *"}}, "schedule.cron"),
]


def _refused(k: Harness, fields: dict[str, Any]) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as refused:
        k.define(**fields)
    return refused.value


@pytest.mark.parametrize(("fields", "field"), WITHOUT_EFFECT)
def test_a_setting_without_effect_is_refused_and_nothing_is_written(
    k: Harness, fields: dict[str, Any], field: str
) -> None:
    refused = _refused(k, fields)
    assert (refused.code, refused.details["field"]) == ("INVALID_ARGUMENT", field)
    assert k.kernel.list_jobs() == [] and k.kernel.events() == []

    # Nor does it revise a job that exists.
    job = k.define()
    last = k.kernel.last_event_id()
    assert _refused(k, fields).details["field"] == field
    assert k.kernel.get_job("job").revision == job.revision
    assert k.kernel.last_event_id() == last


def test_the_same_settings_where_they_take_effect_are_kept(k: Harness) -> None:
    for n, fields in enumerate(
        [
            {"catchup": {"policy": "all", "window": "1h"}},
            {"overlap": "queue", "max_queued": 5},
            # The default every spec carries (an exported spec re-applies).
            {"overlap": "replace", "max_queued": 25},
            {"schedule": {"every": 60}, "dst": {"gap": "shift_forward", "fold": "first"}},
            {"schedule": {"cron": "0 3 * * *"}, "dst": {"gap": "skip"}},
            {"schedule": {"cron": "0 0 13 * fri", "day_match": "all"}},
        ]
    ):
        job = k.define(f"j{n}", **fields)
        exported = k.kernel.get_job(job.id).spec
        assert k.kernel.apply_job(exported)[1] == "unchanged"


def _shell_env(name: str) -> dict[str, Any]:
    return {"kind": "shell", "payload": {"argv": ["ls"], "env": {name: "value"}}}


def _http_header(name: str) -> dict[str, Any]:
    return {"kind": "http", "payload": {"url": "http://h/", "headers": {name: "value"}}}


SECRETS_IN_CLEAR = [
    *(
        (_shell_env(n), f"payload.env.{n}", "secrets:")
        for n in ("API_TOKEN", "PgPassword", "SSH_KEY")
    ),
    *(
        (_http_header(n), f"payload.headers.{n}", "secret_headers:")
        for n in ("Authorization", "Cookie")
    ),
    (
        {"kind": "watchdog", "payload": {"check": {"argv": ["ls"], "env": {"DB_PASSWD": "p"}}}},
        "payload.check.env.DB_PASSWD",
        "secrets:",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "field", "instead"), SECRETS_IN_CLEAR)
def test_a_secret_looking_value_is_refused_and_nothing_is_written(
    k: Harness, fields: dict[str, Any], field: str, instead: str
) -> None:
    refused = _refused(k, fields)
    assert (refused.code, refused.details["field"]) == ("INVALID_ARGUMENT", field)
    assert instead in refused.message
    assert k.kernel.list_jobs() == [] and k.kernel.events() == []


def test_names_that_only_resemble_secrets_and_empty_values_are_kept(k: Harness) -> None:
    k.define(
        "shell",
        kind="shell",
        payload={"argv": ["ls"], "env": {"MODE": "x", "KEYBOARD": "us", "TOKEN": ""}},
    )
    k.define(
        "hook",
        kind="http",
        payload={"url": "http://h/", "headers": {"Idempotency-Key": "k", "X-Team": "data"}},
    )
    assert {j.id for j in k.kernel.list_jobs()} == {"shell", "hook"}
