"""The premise of revision 0028 (kernel/migrations/versions/0028_one_firing_key.py): an
occurrence's idempotency key is told apart by its (job, trigger key) alone, so the unique
(job_id, trigger_key) is the only unique key it needs."""

from __future__ import annotations

import pytest

from kernel.errors import InvalidArgument
from kernel.occurrences.firing import idempotency_key
from kernel.spec.sections import ID
from kernel.spec.task_runs import settings_json, task_job, trigger_key_of

#: The kinds of an enqueued run's trigger key; no other creation makes one.
ENQUEUE_KINDS = ("key:", "enqueue:", "replacing:")


def test_a_job_id_never_holds_the_keys_delimiter() -> None:
    assert ID.fullmatch("a|b") is None
    with pytest.raises(InvalidArgument):
        task_job("a|b", settings_json({}, {}))


@pytest.mark.parametrize(
    ("key", "replaces"),
    [(None, None), ("k|r1", None), ("k", {"occurrence": 7, "nesting": 1})],
)
def test_an_enqueued_runs_trigger_key_is_of_an_enqueue_kind(
    key: str | None, replaces: dict | None
) -> None:
    assert trigger_key_of(key, replaces).startswith(ENQUEUE_KINDS)


def test_a_firings_key_ends_in_its_revision_then_its_params_digest() -> None:
    """Read from the right, neither part holding ``|``: a ``|`` in the trigger key cannot
    make two firings' keys equal."""
    assert idempotency_key("job", "manual:r|r1", 2).rsplit("|", 1) == ["job|manual:r|r1", "r2"]
    *rest, revision, digest = idempotency_key("job", "manual:r", 1, {"kwargs": {"n": 1}}).split("|")
    assert rest == ["job", "manual:r"] and revision == "r1"
    assert digest.startswith("p") and len(digest) == 17
