"""A routed call (``kernel_route_tasks``) refuses the ``apply_async`` options the kernel
cannot honour, naming them, before anything is written (issue 38 item 7, issue 40):
stock Celery honours a ``link`` or a chain's rest, and a routed call that dropped them
left the caller waiting on a step that never ran."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, chain, group

from celery_app import install
from kernel import InvalidArgument, Kernel


@pytest.fixture
def routed_app(tmp_path: Path) -> Any:
    url = f"sqlite:///{tmp_path}/kernel.db"
    Kernel.open(url, migrate_schema=True).close()
    app = Celery("routedopts", broker="memory://", set_as_current=False)
    app.conf.update(kernel_database_url=url, kernel_route_tasks=["routedopts.routed"])
    install(app)

    @app.task(name="routedopts.routed", shared=False)
    def routed(label: str) -> str:
        return label

    @app.task(name="routedopts.other", shared=False)
    def other(value: str) -> str:
        return value

    app.routed, app.other, app.url = routed, other, url
    return app


def _occurrences(app: Any) -> list[Any]:
    kernel = Kernel.open(app.url)
    try:
        return list(kernel.list_occurrences())
    finally:
        kernel.close()


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda app: app.routed.apply_async(("a",), link=app.other.s()), "link"),
        (lambda app: app.routed.apply_async(("a",), link_error=app.other.s()), "link_error"),
        (lambda app: chain(app.routed.s("a"), app.other.s()).apply_async(), "chain"),
        (lambda app: group(app.routed.s("a"), app.routed.s("b")).apply_async(), "group_id"),
        (lambda app: app.routed.apply_async(("a",), time_limit=5), "time_limit"),
        (lambda app: app.routed.apply_async(("a",), serializer="pickle"), "serializer"),
        (lambda app: app.routed.apply_async(("a",), headers={"tenant": "x"}), "headers"),
    ],
    ids=["link", "link_error", "chain", "group", "time_limit", "pickle", "headers"],
)
def test_an_option_the_kernel_cannot_honour_is_refused_naming_it(
    routed_app: Any, call: Any, named: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        call(routed_app)
    assert named in refused.value.field.split(", ")
    assert "kernel_route_tasks" in str(refused.value)
    assert _occurrences(routed_app) == []


def test_honoured_and_publishing_options_are_accepted(routed_app: Any) -> None:
    routed_app.routed.delay("plain")
    routed_app.routed.apply_async(("later",), countdown=5, priority=3, reply_to="r", retry=True)
    routed_app.routed.apply_async(("json",), serializer="json")
    assert len(_occurrences(routed_app)) == 3


def test_countdown_eta_and_expires_of_a_routed_call_are_the_occurrences_times(
    routed_app: Any,
) -> None:
    """As Celery reads them: ``countdown``/``eta`` the time it may start, ``expires``
    seconds after the call or an instant (ISO text too) its start deadline."""
    at = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
    before = datetime.now(UTC)
    routed_app.routed.apply_async(("countdown",), countdown=90, expires=120)
    routed_app.routed.apply_async(("eta",), eta=at, expires=at + timedelta(minutes=5))
    routed_app.routed.apply_async(("iso",), eta=at.isoformat(), expires=at.isoformat())
    routed_app.routed.apply_async(("none",))
    after = datetime.now(UTC)
    got = {o.payload["args"][0]: o for o in _occurrences(routed_app)}
    countdown = got["countdown"]
    assert before + timedelta(seconds=90) <= countdown.available_at <= after + timedelta(seconds=90)
    assert countdown.expires_at is not None
    assert before + timedelta(seconds=120) <= countdown.expires_at <= after + timedelta(seconds=120)
    assert (got["eta"].available_at, got["eta"].expires_at) == (at, at + timedelta(minutes=5))
    assert (got["iso"].available_at, got["iso"].expires_at) == (at, at)
    assert got["none"].expires_at is None


def test_a_tasks_own_expires_applies_to_a_routed_call(routed_app: Any) -> None:
    routed_app.routed.expires = 60
    try:
        before = datetime.now(UTC)
        routed_app.routed.delay("own")
        [occ] = _occurrences(routed_app)
        assert occ.expires_at is not None and occ.expires_at >= before + timedelta(seconds=60)
    finally:
        routed_app.routed.expires = None
