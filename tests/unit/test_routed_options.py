"""A routed call (``kernel_route_tasks``) refuses the ``apply_async`` options the kernel
cannot honour, naming them, before anything is written (issue 38 item 7, issue 40):
stock Celery honours a ``link`` or a chain's rest, and a routed call that dropped them
left the caller waiting on a step that never ran."""

from __future__ import annotations

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
        (lambda app: app.routed.apply_async(("a",), expires=30), "expires"),
        (lambda app: app.routed.apply_async(("a",), serializer="pickle"), "serializer"),
        (lambda app: app.routed.apply_async(("a",), headers={"tenant": "x"}), "headers"),
    ],
    ids=["link", "link_error", "chain", "group", "expires", "pickle", "headers"],
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


def test_a_calls_time_limits_and_priority_are_its_runs_own(routed_app: Any) -> None:
    """Honoured, not refused (issue 38 item 7): the soft limit (else the hard one) is the
    run's timeout, which its hint's Celery time limits enforce; the job is unchanged."""
    routed_app.routed.apply_async(("soft",), soft_time_limit=4, time_limit=9)
    routed_app.routed.apply_async(("hard",), time_limit=7, priority=200)
    routed_app.routed.apply_async(("plain",))
    runs = {o.payload["args"][0]: o for o in _occurrences(routed_app)}
    assert {label: o.definition["timeout"] for label, o in runs.items()} == {
        "soft": 4,
        "hard": 7,
        "plain": None,
    }
    kernel = Kernel.open(routed_app.url)
    try:
        hints = {h.occurrence_id: h for h in kernel.dispatch_batch(limit=9, rehint_after=0)}
    finally:
        kernel.close()
    assert hints[runs["hard"].id].priority == 200 and hints[runs["plain"].id].priority == 0
    assert hints[runs["soft"].id].timeout == 4
