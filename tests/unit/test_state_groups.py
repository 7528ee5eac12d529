"""The named status groups of kernel/states.py: complete, nested, and agreeing with the
schema's own CHECKs and the claimable index."""

from __future__ import annotations

import re

from kernel import states
from kernel.db import schema
from kernel.db.checks import OCCURRENCE_CHECKS
from kernel.states import OccurrenceStatus as S


def _quoted(sql: str) -> set[str]:
    return set(re.findall(r"'([a-z_]+)'", sql))


def test_every_status_is_settled_or_unsettled_never_both() -> None:
    assert set(states.UNSETTLED) | set(states.SETTLED) == set(S)
    assert not set(states.UNSETTLED) & set(states.SETTLED)


def test_the_groups_nest_and_hold_the_states_the_old_tuples_forgot() -> None:
    chain = [states.CLAIMABLE, states.WAITING, states.ACTIVE, states.UNSETTLED]
    for smaller, larger in zip(chain, chain[1:], strict=False):
        assert set(smaller) < set(larger)
    assert S.AWAITING_APPROVAL in states.WAITING
    assert S.NEEDS_ADJUDICATION in states.UNSETTLED
    assert S.NEEDS_ADJUDICATION not in states.ACTIVE


def test_the_schema_says_the_same() -> None:
    checks = dict(OCCURRENCE_CHECKS)
    settled_check = checks["ck_occurrences_settled_iff_final"].split(" AND ")[0]
    assert _quoted(settled_check) == set(states.SETTLED)
    assert _quoted(checks["ck_occurrences_no_waiting_cancel"]) == set(states.CLAIMABLE)
    indexes = {i.name: i for i in schema.occurrences.indexes}
    where = str(indexes["occurrences_claimable"].dialect_options["postgresql"]["where"])
    assert _quoted(where) == set(states.CLAIMABLE)
