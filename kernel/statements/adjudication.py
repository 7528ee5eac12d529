"""Adapter adjudication statements: a worker's ask, and the answer it brings back.

An ask is fenced like a claim: ``token`` names the one live ask of an occurrence's
uncertain run (its ``fence``) until ``ask_deadline``. The answer writes the
occurrence only while it still needs adjudication, at that fence, under that live
ask; an operator's verdict in between changes the status and the answer then moves
nothing.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.schema import adjudication_asks, occurrences
from kernel.statements.operator import VERDICT_RETURNS
from kernel.statements.predicates import OF_OCCURRENCE

__all__ = ["ASK_ADAPTER", "ADAPTER_ADJUDICATE", "ADAPTER_CANNOT_TELL", "ASK_BY_ID"]

OCC = occurrences
ASK = adjudication_asks
_NEEDS = "needs_adjudication"


def _ask_adapter(insert: Any) -> Any:
    """A new ask of an occurrence needing adjudication: its first at this fence, or again
    once the last ask expired unanswered (while asks are left)."""
    needing = sa.select(
        OCC.c.id,
        OCC.c.fence,
        sa.literal("asking"),
        p("ask_token", type_=sa.String),
        p("asker", type_=sa.String),
        sa.literal(1),
        p("now", type_=sa.BigInteger),
        p("deadline", type_=sa.BigInteger),
    ).where(OCC.c.id == p("occurrence_id"), OCC.c.status == _NEEDS)
    # As in REQUEST_PAUSE: the row lock makes PostgreSQL re-check the status against an
    # operator's verdict that committed while this statement waited. SQLite: no-op.
    needing = needing.with_for_update(of=OCC)
    columns = [
        "occurrence_id",
        "fence",
        "state",
        "token",
        "asker",
        "asks",
        "asked_at",
        "ask_deadline",
    ]
    statement = insert(ASK).from_select(columns, needing)
    excluded = statement.excluded
    same_run = ASK.c.fence == excluded.fence
    return statement.on_conflict_do_update(
        index_elements=[ASK.c.occurrence_id],
        set_={
            "fence": excluded.fence,
            "state": "asking",
            "token": excluded.token,
            "asker": excluded.asker,
            "asks": sa.case((same_run, ASK.c.asks + 1), else_=1),
            "asked_at": excluded.asked_at,
            "ask_deadline": excluded.ask_deadline,
        },
        where=sa.or_(
            ~same_run,
            sa.and_(
                ASK.c.state == "asking",
                ASK.c.ask_deadline <= p("now", type_=sa.BigInteger),
                ASK.c.asks < p("max_asks", type_=sa.Integer),
            ),
        ),
    ).returning(ASK.c.fence, ASK.c.asks)


ASK_ADAPTER = {"postgresql": _ask_adapter(postgresql.insert), "sqlite": _ask_adapter(sqlite.insert)}


def _live_ask(fence: Any) -> Any:
    """The ask ``token`` is live for the uncertain run at ``fence``."""
    return sa.exists().where(
        ASK.c.occurrence_id == p("occurrence_id"),
        ASK.c.token == p("ask_token"),
        ASK.c.state == "asking",
        ASK.c.ask_deadline > p("now"),
        ASK.c.fence == fence,
    )


#: The adapter's verdict: applied -> succeeded, not_applied -> retry_wait (a grant earns
#: the uncertain run's attempt back, as an operator's word does).
ADAPTER_ADJUDICATE = (
    sa.update(OCC)
    .where(OCC.c.id == p("occurrence_id"), OCC.c.status == _NEEDS, _live_ask(OCC.c.fence))
    .values(
        status=p("to_status"),
        available_at=p("now"),
        dispatched_at=None,
        settled_at=p("settled"),
        updated_at=p("now"),
    )
    .returning(*VERDICT_RETURNS)
)

#: The adapter could not tell: nobody asks again at this fence; the operator decides.
ADAPTER_CANNOT_TELL = (
    sa.update(ASK)
    .where(
        ASK.c.occurrence_id == p(OF_OCCURRENCE),
        ASK.c.token == p("ask_token"),
        ASK.c.state == "asking",
        ASK.c.ask_deadline > p("now"),
        sa.exists().where(
            OCC.c.id == ASK.c.occurrence_id, OCC.c.status == _NEEDS, OCC.c.fence == ASK.c.fence
        ),
    )
    .values(state="cannot_tell")
    .returning(ASK.c.fence)
)

ASK_BY_ID = sa.select(ASK).where(ASK.c.occurrence_id == p("occurrence_id"))
