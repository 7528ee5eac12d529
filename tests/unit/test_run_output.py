"""A run's output buffer against a real kernel: head as it comes, tail at the end, bytes bounded."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_app.run_output import RunOutput
from kernel import Claim, Kernel


@pytest.fixture
def claim_and_kernel(tmp_path: Path) -> Iterator[tuple[Kernel, Claim]]:
    kernel = Kernel.open(f"sqlite:///{tmp_path / 'k.db'}", migrate_schema=True)
    try:
        kernel.define_job({"id": "j", "kind": "shell", "payload": {"argv": ["true"]}})
        occ = kernel.run_now("j", request_id="r", operator="test", force=True).occurrence
        claim = kernel.claim(occ.id, owner="w")
        assert claim is not None
        yield kernel, claim
    finally:
        kernel.close()


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


def test_secret_values_are_masked_before_they_are_stored(
    claim_and_kernel: tuple[Kernel, Claim],
) -> None:
    kernel, claim = claim_and_kernel
    output = RunOutput(kernel, claim, {})
    output.secrets = {"hunter2"}
    output.write("log", "INFO password is hunter2\n")
    output.flush(final=True)

    assert stored(kernel, claim) == [("log", "INFO password is ***\n")]
