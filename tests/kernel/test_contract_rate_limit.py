"""A rate limit (issue 38 item 7): Celery's ``rate_limit`` kept by the kernel for every
worker and host together. A claim takes its limit's token in one guarded statement; a run
whose token is not free waits, named ``rate_limited`` until then, and is claimed after;
on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from kernel import InvalidArgument

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_a_second_claim_inside_the_interval_waits_named_then_claims(k: Harness) -> None:
    first, second = k.occurrences("limited", 2, rate_limit="20/m")
    assert k.kernel.get_job("limited").spec["rate_limit"] == "20/m"
    claimed = k.kernel.claim(first, owner="w1", lease=30)
    assert claimed is not None
    assert k.kernel.claim(second, owner="w2", lease=30) is None
    blocker = k.kernel.blocker(second)
    assert blocker is not None and blocker.kind == "rate_limited"
    # 20/m: the next token is free 3 s after the first claim (its lease's start).
    free_at = claimed.occurrence.lease_expires_at - timedelta(seconds=30 - 3)  # type: ignore[operator]
    assert blocker.not_before is not None
    assert datetime.fromisoformat(blocker.not_before) == free_at
    assert blocker.text.startswith(f"rate limited until {blocker.not_before}")
    # Not claimable, so neither hinted nor a claim_next candidate, and not stranded.
    assert second not in {h.occurrence_id for h in k.kernel.dispatch_batch(limit=9, rehint_after=0)}
    assert k.kernel.claim_next(owner="w2", lease=30) is None
    k.clock.advance(2.9)
    assert k.kernel.claim(second, owner="w2", lease=30) is None
    k.clock.advance(0.1)
    assert k.kernel.blocker(second).kind == "none"  # type: ignore[union-attr]
    again = k.kernel.claim_next(owner="w2", lease=30)
    assert again is not None and again.occurrence.id == second


def test_a_tasks_runs_share_one_limit_whatever_job_made_them(k: Harness) -> None:
    task = {"kind": "task", "payload": {"task": "proj.send"}, "rate_limit": "1/s"}
    [fired] = k.occurrences("beat-entry", 1, **task)
    made = k.kernel.enqueue(task="proj.send", settings={"rate_limit": "1/s"})
    assert k.kernel.claim(fired, owner="w1", lease=30) is not None
    assert k.kernel.claim(made.occurrence_id, owner="w2", lease=30) is None
    assert k.kernel.blocker(made.occurrence_id).text.endswith("(rate limit task:proj.send)")  # type: ignore[union-attr]
    other = k.kernel.enqueue(task="proj.other")  # no limit: untouched
    assert k.kernel.claim(other.occurrence_id, owner="w3", lease=30) is not None
    k.clock.advance(1)
    assert k.kernel.claim(made.occurrence_id, owner="w2", lease=30) is not None


def test_a_refused_claim_takes_no_token(k: Harness) -> None:
    k.kernel.set_pool_limit("db", 1)
    first, second = k.occurrences("limited", 2, rate_limit="1/h", pool="db", max_attempts=3)
    held = k.kernel.claim(first, owner="w1", lease=30)
    assert held is not None
    k.kernel.fail(first, owner="w1", fence=held.fence, code="E", message="boom")
    # The pool is free again; the token is not, for an hour.
    assert k.kernel.blocker(second).kind == "rate_limited"  # type: ignore[union-attr]
    k.clock.advance(3600)
    assert k.kernel.claim(second, owner="w2", lease=30) is not None


@pytest.mark.parametrize("value", ["20/d", "fast", "0/s", -1, "5000/s", True])
def test_a_rate_limit_not_celerys_is_refused_naming_it(k: Harness, value: object) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.define("job", rate_limit=value)
    assert refused.value.field == "rate_limit"
    assert repr(value) in refused.value.message


def test_numbers_are_per_second_as_celery_reads_them(k: Harness) -> None:
    assert k.define("a", rate_limit=2).spec["rate_limit"] == "2/s"
    assert k.define("b", rate_limit="10").spec["rate_limit"] == "10/s"
    assert k.define("c", rate_limit=" 1.50/h ").spec["rate_limit"] == "1.5/h"
