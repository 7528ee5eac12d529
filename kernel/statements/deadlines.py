"""The start deadline's statement: a waiting occurrence past its ``expires_at`` (Celery's
``expires``) is settled skipped ``expired`` instead of being started late."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.db.schema import occurrences
from kernel.statements.predicates import start_expired

__all__ = ["SKIP_EXPIRED"]

OCC = occurrences
_expired = start_expired(p("now"))
#: NULL: every expired occurrence (Beat's sweep); else only that one (a claim met it).
_which = sa.or_(
    sa.cast(p("occurrence_id"), sa.BigInteger).is_(None), OCC.c.id == p("occurrence_id")
)

#: Skip expired occurrences, the earliest deadline first, at most ``limit``. Whoever meets
#: one (a claim, Beat's upkeep) runs this; the outer guard decides again on the row as it
#: is when written, so of a claim and the sweep racing exactly one settles it (PostgreSQL:
#: the batch skips a row a claim holds locked, and a claim that waited reads it settled).
SKIP_EXPIRED = (
    sa.update(OCC)
    .where(
        _expired,
        OCC.c.id.in_(
            sa.select(OCC.c.id)
            .where(_expired, _which)
            .order_by(OCC.c.expires_at, OCC.c.id)
            .limit(p("limit"))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        ),
    )
    .values(status="skipped", skip_reason="expired", settled_at=p("now"), updated_at=p("now"))
    .returning(OCC.c.id, OCC.c.job_id, OCC.c.fence, OCC.c.attempt, OCC.c.expires_at)
)
