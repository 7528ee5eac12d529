"""A run's output buffer against a real kernel: head as it comes, tail at the end, bytes bounded."""

from __future__ import annotations

import base64
import itertools
import json
import random
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.secrets import scrub, secret_forms
from celery_app.run_output import RunOutput
from kernel import Claim, Kernel


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    """A kernel holding job ``j``."""
    kernel = Kernel.open(f"sqlite:///{tmp_path / 'k.db'}", migrate_schema=True)
    try:
        kernel.define_job({"id": "j", "kind": "shell", "payload": {"argv": ["true"]}})
        yield kernel
    finally:
        kernel.close()


_requests = itertools.count()


def claimed(kernel: Kernel) -> Claim:
    """A new occurrence of ``j``, claimed by ``w``."""
    occ = kernel.run_now("j", request_id=f"r{next(_requests)}", operator="test", force=True)
    claim = kernel.claim(occ.occurrence.id, owner="w")
    assert claim is not None
    return claim


@pytest.fixture
def claim_and_kernel(kernel: Kernel) -> tuple[Kernel, Claim]:
    return kernel, claimed(kernel)


def stored(kernel: Kernel, claim: Claim) -> list[tuple[str, str]]:
    events = kernel.events(occurrence_id=claim.occurrence.id, limit=1000)
    return [
        (chunk["stream"], chunk["text"])
        for e in events
        if e.type == "run_output"
        for chunk in e.data["output"]
    ]


def test_the_head_and_the_tail_are_kept_within_the_limit(
    claim_and_kernel: tuple[Kernel, Claim],
) -> None:
    kernel, claim = claim_and_kernel
    output = RunOutput(kernel, claim, {"limit": 4096})
    text = "".join(f"line {i} ü\n" for i in range(3000))
    chunks = random.Random(7)
    at = 0
    while at < len(text):
        size = chunks.randint(1, 5000)
        output.write("stdout", text[at : at + size])
        at += size
        if chunks.random() < 0.3:
            output.flush()
    output.flush(final=True)

    kept = stored(kernel, claim)
    out = "".join(t for s, t in kept if s == "stdout")
    assert len(out.encode()) <= 4096
    assert out.startswith("line 0 ü\n") and out.endswith("line 2999 ü\n")
    dropped = len(text.encode()) - len(out.encode())
    assert ("note", f"[{dropped} bytes of output not kept]\n") in kept


_SECRET_CHARS = "abcXYZ09+/:%é"  # never "*": a mask next to a mask must not spell a secret


def encoded_forms(secret: str) -> list[str]:
    """How programs print a secret: as is, base64 alone or inside a Basic header, URL-encoded."""
    basic = base64.b64encode(f"user:{secret}".encode()).decode()
    return [secret, base64.b64encode(secret.encode()).decode(), basic, quote(secret, safe="")]


@given(data=st.data())
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_secret_is_stored_however_the_output_is_split(
    kernel: Kernel, data: st.DataObject
) -> None:
    secrets = data.draw(
        st.sets(st.text(_SECRET_CHARS, min_size=6, max_size=24), min_size=1, max_size=3)
    )
    segment = st.one_of(
        st.text("ab:=/ \n", max_size=40),
        st.sampled_from(sorted(secrets)).flatmap(lambda s: st.sampled_from(encoded_forms(s))),
    )
    text = "".join(data.draw(st.lists(segment, max_size=12)))
    limit = data.draw(st.integers(16, 4096))
    sizes = data.draw(st.lists(st.integers(1, 64), min_size=1, max_size=40))
    claim = claimed(kernel)
    try:
        output = RunOutput(kernel, claim, {"limit": limit})
        output.secrets = set(secrets)
        at = 0
        for size in itertools.cycle(sizes):
            if at >= len(text):
                break
            output.write("stdout", text[at : at + size])
            at += size
            if size % 3 == 0:
                output.flush()
        output.flush(final=True)
    finally:  # the next example claims anew
        kernel.succeed(claim.occurrence.id, owner="w", fence=claim.fence, result=None)

    shown = "".join(t for _, t in stored(kernel, claim))
    for secret in secrets:
        for form in secret_forms(secret):
            assert form not in shown
    if len(text.encode()) <= limit // 2:  # nothing dropped: all but the secrets is kept
        assert shown == scrub(text, secrets)


def test_a_secret_printed_in_two_pieces_is_stored_in_neither(
    claim_and_kernel: tuple[Kernel, Claim],
) -> None:
    kernel, claim = claim_and_kernel
    output = RunOutput(kernel, claim, {})
    output.secrets = {"canary-0123456789"}
    output.write("stdout", "token=canary-01234")
    output.flush()  # the lease keeper's flush between two pipe reads
    output.write("stdout", "56789 and Y2FuYXJ5LTAxMjM0NTY3ODk=\n")
    output.write("log", "INFO password is canary-0123456789\n")
    output.flush(final=True)

    kept = stored(kernel, claim)
    shown = {name: "".join(text for s, text in kept if s == name) for name in ("stdout", "log")}
    assert shown == {"stdout": "token=*** and ***\n", "log": "INFO password is ***\n"}
    assert not any("01234" in text or "56789" in text for _, text in kept)


_WRAPPED_SECRET = 'canary/ünïcode+secret "quoted" value that runs long enough to wrap' * 2


@pytest.mark.parametrize(
    "printed",
    [
        pytest.param(json.dumps({"token": _WRAPPED_SECRET}), id="json-escaped"),
        pytest.param(json.dumps({"t": _WRAPPED_SECRET}, ensure_ascii=False), id="json-utf8"),
        pytest.param(quote(_WRAPPED_SECRET, safe=""), id="percent-upper"),
        pytest.param(
            re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(_WRAPPED_SECRET)),
            id="percent-lower",
        ),
        pytest.param(_WRAPPED_SECRET.encode().hex(), id="hex"),
        pytest.param(_WRAPPED_SECRET.encode().hex().upper(), id="hex-upper"),
        pytest.param(base64.encodebytes(_WRAPPED_SECRET.encode()).decode(), id="base64-76"),
        pytest.param(
            base64.encodebytes(b"Authorization: Basic " + _WRAPPED_SECRET.encode()).decode(),
            id="base64-76-offset",
        ),
        pytest.param(
            "\r\n".join(
                textwrap.wrap(base64.b64encode(b"x" + _WRAPPED_SECRET.encode()).decode(), 64)
            ),
            id="base64-pem-crlf",
        ),
    ],
)
def test_every_printed_form_of_a_secret_is_masked_in_pieces(
    claim_and_kernel: tuple[Kernel, Claim], printed: str
) -> None:
    kernel, claim = claim_and_kernel
    output = RunOutput(kernel, claim, {})
    output.secrets = {_WRAPPED_SECRET}
    for at in range(0, len(printed), 7):  # pieces smaller than a line of base64
        output.write("stdout", printed[at : at + 7])
    output.flush(final=True)

    shown = "".join(text for _, text in stored(kernel, claim))
    unwrapped = shown.replace("\r", "").replace("\n", "")
    assert "***" in shown
    for form in secret_forms(_WRAPPED_SECRET):  # not a piece of any: 12 characters tell much
        assert not any(form[at : at + 12] in unwrapped for at in range(len(form) - 11))
