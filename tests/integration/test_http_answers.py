"""A response is an outcome (issue 41, items 2, 3, 5, 9; issue 39, item 13).

Once a server answered, an http run's failure is ``applied`` or ``unknown``, never
``not_applied``, so an at-most-once job never sends its request again: each test runs a
real job through the kernel and the worker's run path (``run_occurrence``, SQLite, a
manual clock moved past every backoff) against :mod:`integration.misbehaving`, and counts
the requests that carried the occurrence's ``Idempotency-Key``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from integration.misbehaving import Misbehaving, elsewhere, misbehaving, over_tls
from unit.adapter_support import make_context

from adapters.base import AdapterError
from adapters.http import HttpAdapter
from celery_app.held_run import LeaseKeeper
from celery_app.runtime import run_occurrence
from kernel import Kernel
from kernel.errors import InvalidArgument
from kernel.states import Effect
from kernel.testing import ManualClock

__all__ = ["elsewhere", "misbehaving", "over_tls"]  # fixtures


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[tuple[Kernel, ManualClock]]:
    clock = ManualClock()
    opened = Kernel.open(f"sqlite:///{tmp_path / 'k.db'}", migrate_schema=True, clock=clock)
    yield opened, clock
    opened.close()


def closed_port() -> int:
    """A port that was free a moment ago: nothing listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def redirect(server: Misbehaving, status: int, to: str) -> str:
    return f"{server.url}/redirect/{status}?to={quote(to, safe='')}"


def run_at_most_once(kernel: tuple[Kernel, ManualClock], payload: dict[str, Any]) -> Any:
    """Run an at-most-once job with 3 attempts until nothing is left to run; its occurrence."""
    k, clock = kernel
    k.define_job(
        {
            "id": "charge",
            "kind": "http",
            "delivery": "at-most-once",
            "max_attempts": 3,
            "retry": {"backoff": "1s", "factor": 1, "max": "1s", "jitter": 0},
            "payload": payload,
        }
    )
    occ_id = k.run_now("charge", request_id="r1", operator="ops").occurrence.id
    adapters = {"http": HttpAdapter()}
    for _ in range(4):  # one more round than attempts: a fourth send would be seen
        run_occurrence(k, adapters, occ_id, main_pid=0, keeper=LeaseKeeper())
        clock.advance(60)
    return k.get_occurrence(occ_id)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({}, id="302-not-followed"),
        pytest.param({"follow_redirects": 3}, id="302-to-a-closed-port"),
    ],
)
def test_a_redirect_to_nowhere_is_not_sent_again(
    kernel: tuple[Kernel, ManualClock], misbehaving: Misbehaving, payload: dict[str, Any]
) -> None:
    url = redirect(misbehaving, 302, f"http://127.0.0.1:{closed_port()}/charge")

    occurrence = run_at_most_once(kernel, {"url": url, "json": {"amount": 5}, **payload})

    assert len(misbehaving.keyed(occurrence.id)) == 1
    assert occurrence.status.value == "needs_adjudication"
    assert occurrence.attempt == 1


@pytest.mark.parametrize("target", ["ftp://127.0.0.1/charge", "/status/503", "/status/500"])
def test_a_followed_redirect_that_fails_leaves_the_effect_unknown(
    kernel: tuple[Kernel, ManualClock], misbehaving: Misbehaving, target: str
) -> None:
    to = target if "://" in target else misbehaving.url + target
    payload = {"url": redirect(misbehaving, 307, to), "json": {"n": 1}, "follow_redirects": 2}

    occurrence = run_at_most_once(kernel, payload)

    assert [r["path"] for r in misbehaving.received if r["path"].startswith("/redirect")] == [
        payload["url"].removeprefix(misbehaving.url)
    ]
    assert occurrence.status.value == "needs_adjudication"


@pytest.mark.parametrize("status", [503, 429, 404])
def test_a_refusal_is_an_answer_not_a_licence_to_send_again(
    kernel: tuple[Kernel, ManualClock], misbehaving: Misbehaving, status: int
) -> None:
    occurrence = run_at_most_once(
        kernel, {"url": f"{misbehaving.url}/status/{status}", "body": "x"}
    )

    assert len(misbehaving.keyed(occurrence.id)) == 1
    assert occurrence.status.value == "needs_adjudication"


@pytest.mark.parametrize("charset", ["hex", "rot13", "base64", "zlib", "idna", "undefined", "nope"])
def test_a_200_in_an_odd_charset_is_a_success(
    kernel: tuple[Kernel, ManualClock], misbehaving: Misbehaving, charset: str
) -> None:
    occurrence = run_at_most_once(
        kernel, {"url": f"{misbehaving.url}/charset/{charset}", "json": 1}
    )

    assert len(misbehaving.keyed(occurrence.id)) == 1
    assert occurrence.status.value == "succeeded"
    assert occurrence.result["status"] == 200
    assert occurrence.result["body"] == "48656c6c6f"  # read as UTF-8, the declared codec refused


@pytest.mark.parametrize("interim", [102, 103])
def test_interim_answers_before_the_200_are_skipped(
    kernel: tuple[Kernel, ManualClock], misbehaving: Misbehaving, interim: int
) -> None:
    occurrence = run_at_most_once(
        kernel, {"url": f"{misbehaving.url}/interim/{interim}", "json": 1}
    )

    assert len(misbehaving.keyed(occurrence.id)) == 1
    assert occurrence.status.value == "succeeded"
    assert (occurrence.result["status"], occurrence.result["body"]) == (200, "final")


def test_a_body_shorter_than_its_length_is_an_applied_failure(
    kernel: tuple[Kernel, ManualClock], misbehaving: Misbehaving
) -> None:
    occurrence = run_at_most_once(kernel, {"url": f"{misbehaving.url}/short", "json": 1})

    assert len(misbehaving.keyed(occurrence.id)) == 1
    # Applied: an at-most-once run is not retried; a dead letter an operator reads.
    assert occurrence.status.value == "dead_letter"
    assert occurrence.last_error["code"] == "HTTP_BODY"
    assert "400 bytes read, 600 more expected" in occurrence.last_error["message"]


def execute(payload: dict[str, Any]) -> Any:
    return HttpAdapter().execute(make_context("http", payload))


def failure(payload: dict[str, Any]) -> AdapterError:
    with pytest.raises(AdapterError) as caught:
        execute(payload)
    return caught.value


def test_the_short_body_is_applied_even_at_least_once(misbehaving: Misbehaving) -> None:
    error = failure({"url": f"{misbehaving.url}/short"})

    assert (error.code, error.effect, error.retryable) == ("HTTP_BODY", Effect.APPLIED, True)


def test_headers_and_secrets_never_cross_an_origin_change(
    misbehaving: Misbehaving, elsewhere: Misbehaving, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "Bearer canary-77")
    other = elsewhere.url.replace("127.0.0.1", "localhost")
    # One hop on the same origin keeps them; the next, to another port and host, does not.
    first = redirect(misbehaving, 302, redirect(misbehaving, 302, f"{other}/landed"))
    payload = {
        "url": first,
        "headers": {"X-Team": "data"},
        "secret_headers": {"Authorization": "HOOK_TOKEN"},
    }

    result = execute(payload)

    assert (result["status"], result["body"]) == (200, "ok: /landed")
    assert [r["headers"]["Authorization"] for r in misbehaving.received] == ["Bearer canary-77"] * 2
    assert [r["headers"]["X-Team"] for r in misbehaving.received] == ["data"] * 2
    [landed] = elsewhere.received
    sent = {name.lower() for name in landed["headers"]}
    assert not sent & {"authorization", "x-team", "idempotency-key", "x-kernel-job"}


def test_a_post_follows_no_redirect_unless_its_job_says_so(misbehaving: Misbehaving) -> None:
    url = redirect(misbehaving, 303, f"{misbehaving.url}/receipt")

    error = failure({"url": url, "json": {"amount": 5}})
    followed = execute({"url": url, "json": {"amount": 5}, "follow_redirects": 1})

    assert (error.code, error.effect, error.retryable) == ("HTTP_REDIRECT", Effect.UNKNOWN, False)
    assert "answered 303" in error.message and "follow_redirects" in error.message
    assert followed["body"] == "ok: /receipt"
    # 303 means "see the answer there": fetched with GET and no body.
    assert [(r["method"], r["body"]) for r in misbehaving.received] == [
        ("POST", '{"amount":5}'),
        ("POST", '{"amount":5}'),
        ("GET", ""),
    ]


def test_a_307_sends_the_same_request_on(misbehaving: Misbehaving) -> None:
    url = redirect(misbehaving, 307, f"{misbehaving.url}/there")

    execute({"url": url, "body": "same", "follow_redirects": 1})

    assert [(r["method"], r["body"]) for r in misbehaving.received] == [
        ("POST", "same"),
        ("POST", "same"),
    ]


def test_a_get_follows_a_few_redirects_by_default(misbehaving: Misbehaving) -> None:
    url = f"{misbehaving.url}/end"
    for _ in range(5):
        url = redirect(misbehaving, 301, url)
    assert execute({"url": url})["body"] == "ok: /end"

    error = failure({"url": redirect(misbehaving, 301, url)})  # a sixth hop
    assert (error.code, error.effect) == ("HTTP_REDIRECT", Effect.UNKNOWN)


def test_https_never_redirects_to_http(over_tls: Misbehaving, misbehaving: Misbehaving) -> None:
    assert execute({"url": f"{over_tls.url}/fine"})["body"] == "ok: /fine"  # TLS works

    error = failure({"url": redirect(over_tls, 302, f"{misbehaving.url}/in-clear")})

    assert (error.code, error.effect, error.retryable) == ("HTTP_REDIRECT", Effect.UNKNOWN, False)
    assert "http:// from https://" in error.message
    assert misbehaving.received == []


def test_a_redirect_without_a_location_is_an_unknown_outcome(misbehaving: Misbehaving) -> None:
    error = failure({"url": f"{misbehaving.url}/status/302", "json": 1})

    assert (error.code, error.effect, error.retryable) == ("HTTP_STATUS", Effect.UNKNOWN, False)


@pytest.mark.parametrize("value", [-1, 11, "3", True])
def test_follow_redirects_is_a_small_count(value: Any) -> None:
    with pytest.raises(InvalidArgument) as refused:
        make_context("http", {"url": "http://127.0.0.1/", "follow_redirects": value})
    assert refused.value.field == "payload.follow_redirects"
