"""Credentials are masked in every form a database or broker URL takes, and only they."""

from __future__ import annotations

import pytest

from kernel.errors import InvalidArgument
from kernel.redaction import holds_credential, is_sensitive_name, masked_url
from kernel.spec.jobspec import validate_job_spec

_FORMS = [
    ("postgresql://kernel:PW@db/kernel", "postgresql://kernel:***@db/kernel"),
    (
        "postgresql+psycopg://kernel@db/kernel?password=PW",
        "postgresql+psycopg://kernel@db/kernel?password=***",
    ),
    (
        "postgresql://k@db/k?sslmode=require&sslpassword=PW&x=1",
        "postgresql://k@db/k?sslmode=require&sslpassword=***&x=1",
    ),
    (
        "host=db user=kernel password=PW dbname=kernel",
        "host=db user=kernel password=*** dbname=kernel",
    ),
    ("host=db password = 'P W\\'s' dbname=k", "host=db password = *** dbname=k"),
    ("redis://:PW@cache:6379/0", "redis://:***@cache:6379/0"),
    (
        "rediss://app:PW@cache:6380/0?ssl_cert_reqs=required",
        "rediss://app:***@cache:6380/0?ssl_cert_reqs=required",
    ),
    ("redis://cache:6379/0?password=PW", "redis://cache:6379/0?password=***"),
    ("amqp://guest:PW@rabbit:5672//", "amqp://guest:***@rabbit:5672//"),
    (
        "sentinel://:PW@h1:26379;sentinel://:PW@h2:26379",
        "sentinel://:***@h1:26379;sentinel://:***@h2:26379",
    ),
    ("postgresql://u:P@W/x@db/k", "postgresql://u:***@db/k"),
    (
        "the kernel database 'postgresql://u:PW@h/db' is down",
        "the kernel database 'postgresql://u:***@h/db' is down",
    ),
    ("https://api/hook?token=PW&day=1", "https://api/hook?token=***&day=1"),
]


@pytest.mark.parametrize(("text", "shown"), _FORMS)
def test_every_credential_form_is_masked(text: str, shown: str) -> None:
    assert masked_url(text) == shown
    assert "PW" not in masked_url(text) and "P W" not in masked_url(text)


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:///var/kernel.db",
        "postgresql+psycopg://kernel@db:5432/kernel?sslmode=require&connect_timeout=5",
        "filesystem://",
        "http://host/?x=a:b@c",
        "host=db user=kernel dbname=kernel",
    ],
)
def test_text_without_credentials_is_unchanged(text: str) -> None:
    assert masked_url(text) == text


@pytest.mark.parametrize(
    "name",
    ["DB_PASS", "SMTP_PASS", "LDAP_PW", "PG_DSN", "SENTRY_DSN", "GPG_PASSPHRASE", "Pass", "pw"],
)
def test_common_credential_names_are_sensitive(name: str) -> None:
    assert is_sensitive_name(name)


@pytest.mark.parametrize("name", ["PASSPORT_DIR", "BYPASS_CACHE", "COMPASS", "DSNAME", "PWM"])
def test_words_that_merely_contain_pass_are_not(name: str) -> None:
    assert not is_sensitive_name(name)


@pytest.mark.parametrize(
    ("value", "held"),
    [
        ("postgresql://app:pw@db/app", True),
        ("redis://:pw@cache:6379/0", True),
        ("host=db password=pw", True),
        ("postgresql://app@db/app", False),
        ("https://example.com/a?b=c", False),
        ("plain", False),
    ],
)
def test_a_value_holding_a_credential_is_recognised(value: str, held: bool) -> None:
    assert holds_credential(value) is held


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"DB_PASS": "hunter2"}, "payload.env.DB_PASS"),
        ({"SENTRY_DSN": "https://k@sentry.example/1"}, "payload.env.SENTRY_DSN"),
        ({"DATABASE_URL": "postgresql://u:pw@db/app"}, "payload.env.DATABASE_URL"),
    ],
)
def test_a_job_env_holding_a_credential_is_refused(env: dict[str, str], field: str) -> None:
    spec = {"id": "j", "kind": "shell", "payload": {"argv": ["true"], "env": env}}
    with pytest.raises(InvalidArgument) as refused:
        validate_job_spec(spec)
    assert field in refused.value.message and "secrets:" in refused.value.message
