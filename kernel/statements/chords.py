"""A chord's statements: its row, made with its members, which their settles count down;
its growth, close and failure."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.schema import chords, occurrences

__all__ = [
    "CHORD_ABANDONED",
    "CHORD_CLOSES",
    "CHORD_GROWS",
    "CHORD_MEMBERS",
    "CHORD_MEMBER_ADDS",
    "CHORD_MEMBER_FAILS",
    "CHORD_MEMBER_HANDED_OVER",
    "CHORD_MEMBER_SUCCEEDS",
    "CHORD_ROW",
    "HOLDER_LINKS",
    "INSERT_CHORD",
]


def _p(name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(name)


def _insert_chord(insert: Any) -> Any:
    return (
        insert(chords)
        .values(
            id=_p("chord_id"), members=_p("members"), body=_p("body"),
            remaining=_p("remaining"), created_at=_p("now"), closed_at=_p("closed_at"),
        )
        .on_conflict_do_nothing()
        .returning(chords.c.id)
    )  # fmt: skip


#: A chord's row, made with its members; an id that exists is not made again (zero rows).
INSERT_CHORD = {
    "postgresql": _insert_chord(postgresql.insert),
    "sqlite": _insert_chord(sqlite.insert),
}
_OPEN = sa.and_(chords.c.id == _p("chord_id"), chords.c.remaining > 0, chords.c.failed_at.is_(None))
#: A member succeeded: one fewer to wait for, while the chord is open (the row stays held
#: until the settle commits, so the next member's settle counts after it). The one that
#: reads ``remaining`` 0 makes the body.
CHORD_MEMBER_SUCCEEDS = (
    sa.update(chords)
    .where(_OPEN)
    .values(remaining=chords.c.remaining - 1)
    .returning(chords.c.remaining, chords.c.closed_at, chords.c.members, chords.c.body)
)
#: A chord's row as it is now (a refused growth or close reads it once to say why).
CHORD_ROW = sa.select(
    chords.c.members, chords.c.remaining, chords.c.closed_at, chords.c.failed_at
).where(chords.c.id == _p("chord_id"))


def _chord_grows(*guard: Any) -> Any:
    """Members added to a chord that has not failed: compare-and-set on the members read
    (another growth, or a member's replacement, may change them first: zero rows)."""
    return (
        sa.update(chords)
        .where(chords.c.id == _p("chord_id"), chords.c.failed_at.is_(None),
               chords.c.members == _p("members"), *guard)
        .values(members=_p("new_members"), remaining=chords.c.remaining + _p("added"))
        .returning(chords.c.id)
    )  # fmt: skip


#: A running member's run, locked while its lease holds (fenced, as its settle is): its
#: links name its chord. Held until the transaction commits: no expiry ends it meanwhile.
HOLDER_LINKS = (
    sa.select(occurrences.c.links)
    .where(
        occurrences.c.id == _p("occurrence_id"), occurrences.c.status == "running",
        occurrences.c.lease_owner == _p("owner"), occurrences.c.fence == _p("held_fence"),
        occurrences.c.lease_expires_at > _p("now"),
    )
    .with_for_update()
)  # fmt: skip
#: The caller of an open chord (a generator's header) adds the members it yielded.
CHORD_GROWS = _chord_grows(chords.c.closed_at.is_(None))
#: A running member adds members (Celery's add_to_chord): its chord's body is not made
#: yet, as that member has not settled (remaining > 0).
CHORD_MEMBER_ADDS = _chord_grows(chords.c.remaining > 0)
#: The caller closes its open chord: the size is known. With ``remaining`` 0 (every member
#: settled meanwhile) the close makes the body; else the last member's settle does.
CHORD_CLOSES = (
    sa.update(chords)
    .where(chords.c.id == _p("chord_id"), chords.c.closed_at.is_(None),
           chords.c.failed_at.is_(None))
    .values(closed_at=_p("now"))
    .returning(chords.c.remaining, chords.c.members, chords.c.body)
)  # fmt: skip
#: The caller of an open chord failed while making its members: the chord fails, once.
CHORD_ABANDONED = (
    sa.update(chords)
    .where(chords.c.id == _p("chord_id"), chords.c.closed_at.is_(None),
           chords.c.failed_at.is_(None))
    .values(failed_at=_p("now"), closed_at=_p("now"))
    .returning(chords.c.body)
)  # fmt: skip
#: A member failed for good: the chord fails, once (zero rows when it failed already).
CHORD_MEMBER_FAILS = (
    sa.update(chords).where(_OPEN).values(failed_at=_p("now")).returning(chords.c.body)
)
#: An open chord's members (group order), None when it is not open.
CHORD_MEMBERS = sa.select(chords.c.members).where(_OPEN)
#: A member replaced: its place in ``members`` is its heirs', ``added`` more than one
#: (a group its chain ends with), compare-and-set on the members read (zero rows: another
#: member's hand-over changed them first).
CHORD_MEMBER_HANDED_OVER = (
    sa.update(chords)
    .where(_OPEN, chords.c.members == _p("members"))
    .values(members=_p("new_members"), remaining=chords.c.remaining + _p("added"))
    .returning(chords.c.id)
)
