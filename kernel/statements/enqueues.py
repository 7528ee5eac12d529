"""Enqueue's statement: occurrences of a task's implicit job, one statement per batch;
and a chord's row, which its members' settles count down."""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.clock import StatementNow
from kernel.db.driver import DriverStatement
from kernel.db.json_text import json_object, omitted_when
from kernel.db.schema import chords, jobs, occurrences
from kernel.events import EventType
from kernel.statements.logged import logged

__all__ = [
    "CHORD_ABANDONED",
    "CHORD_CLOSES",
    "CHORD_GROWS",
    "CHORD_MEMBERS",
    "CHORD_MEMBER_ADDS",
    "CHORD_ROW",
    "HOLDER_LINKS",
    "CHORD_MEMBER_FAILS",
    "CHORD_MEMBER_HANDED_OVER",
    "CHORD_MEMBER_SUCCEEDS",
    "INSERT_CHORD",
    "ENQUEUE_COLUMNS",
    "LOG_ENQUEUED",
    "ENQUEUE_OCCURRENCE",
    "MAX_ROWS",
    "enqueue_chunks",
    "enqueue_occurrences",
    "enqueue_params",
]

OCC = occurrences

#: What each enqueued row is given (bind ``<name>_<row>``). Its times are relative to the
#: statement's instant (kernel/spec/enqueue_request.py ``EnqueueRow``); its job's
#: revision comes from the job row; the rest are the constants of a new queued occurrence.
ENQUEUE_COLUMNS = (
    "job_id",
    "trigger_key",
    "idempotency_key",
    "max_attempts",
    "max_lost_leases",
    "delay_ms",
    "not_before",
    "hinted",
    "queue",
    "delivery",
    "pool",
    "exclusive",
    "definition",
    "priority",
    "links",
    "parent_id",
    "expires_at",
    "expires_after",
    "rate_limit",
)
_TYPES: dict[str, Any] = {
    **{name: OCC.c[name].type for name in ENQUEUE_COLUMNS if name in OCC.c},
    "delay_ms": sa.BigInteger(),
    "not_before": sa.BigInteger(),
    "hinted": sa.Boolean(),
    "expires_after": sa.BigInteger(),
}
_CONSTANTS: dict[str, Any] = {
    "status": "queued",
    "attempt": 0,
    "fence": 0,
    "kind": "task",
    "cancel_requested": False,
    "chain_depth": 0,
}
_INSERTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def _row() -> sa.Select[Any]:
    """One row's values as typed binds (PostgreSQL cannot type a bare NULL)."""
    return sa.select(
        *(sa.cast(sa.bindparam(f"{n}_0"), _TYPES[n]).label(n) for n in ENQUEUE_COLUMNS)
    )


#: A batch's values per row: the columns but the definition, then the definition's own
#: text (between its template's head and tail, sent once a batch) and that template's index.
_BATCH_COLUMNS = (*(n for n in ENQUEUE_COLUMNS if n != "definition"), "definition", "template")
_BATCH_VALUES = operator.itemgetter(*_BATCH_COLUMNS[:-2])
_json = json.JSONEncoder(separators=(",", ":")).encode


def _given(dialect: str, rows: int) -> Any:
    """The rows' values as a FROM: one row's binds; a batch's JSON texts (one statement and
    one plan whatever its size; a UNION of a SELECT per row took seconds to plan, psycopg's
    escaping of text arrays cost more CPU than the rest of a batch), each definition as its
    run's own text, its template's head and tail sent once (with them the JSON was 4.3
    times as long: bench/enqueue_explain.py). PostgreSQL reads it twice: a CTE."""
    values = _row() if rows == 1 else _batch(dialect)
    return values.cte("given") if dialect == "postgresql" else values.subquery("given")


def _batch(dialect: str) -> sa.TextualSelect:
    """A batch's values (:func:`enqueue_params`): PostgreSQL zips one JSON array per column
    (objects per row repeat every name), a string stays text (a cast to ``VARCHAR(n)`` would
    cut a value the column refuses); SQLite reads an array per row (objects: +7 ms/500)."""
    if dialect == "postgresql":
        names = ", ".join(f'"{name}"' for name in _BATCH_COLUMNS)
        rows = ", ".join(f"json_array_elements_text(CAST(:given_{i} AS JSON))"
                         for i in range(len(_BATCH_COLUMNS)))  # fmt: skip
        rows = f"ROWS FROM ({rows}) AS c({names})"
        at = '[CAST(c."template" AS INTEGER) + 1]'

        def column(name: str) -> str:
            return f'c."{name}"'

        def template(part: str) -> str:
            return f"(CAST(:{part} AS TEXT[])){at}"

    else:
        rows = "json_each(:given)"

        def column(name: str) -> str:
            return f"json_extract(value, '$[{_BATCH_COLUMNS.index(name)}]')"

        def template(part: str) -> str:
            return f"json_extract(:{part}, printf('$[%d]', {column('template')}))"

    def read(name: str) -> str:
        kind = _TYPES[name]
        if name == "definition":
            return f"{template('heads')} || {column(name)} || {template('tails')}"
        if dialect == "sqlite" or isinstance(kind, sa.String):
            return column(name)
        return f"CAST({column(name)} AS {kind.compile()})"  # INTEGER, BIGINT, BOOLEAN

    selected = ", ".join(f'{read(name)} AS "{name}"' for name in ENQUEUE_COLUMNS)
    return sa.text(f"SELECT {selected} FROM {rows}").columns(
        *(sa.column(name, _TYPES[name]) for name in ENQUEUE_COLUMNS)
    )


def enqueue_params(dialect: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The parameters of :func:`enqueue_occurrences` for ``rows`` (values by column; a
    row's ``definition_parts``, its definition as (head, own text, tail), else the whole
    text is its own), but for ``now`` (``Tx.now_param``)."""
    if len(rows) == 1:
        return {f"{name}_0": rows[0][name] for name in ENQUEUE_COLUMNS}
    templates: dict[tuple[str, str], int] = {}
    given = []
    for row in rows:
        head, own, tail = row.get("definition_parts") or ("", row["definition"], "")
        at = templates.setdefault((head, tail), len(templates))
        given.append((*_BATCH_VALUES(row), own, at))
    heads, tails = [head for head, _ in templates], [tail for _, tail in templates]
    if dialect == "postgresql":
        columns = enumerate(zip(*given, strict=True))
        return {**{f"given_{i}": _json(c) for i, c in columns}, "heads": heads, "tails": tails}
    return {"given": _json(given), "heads": _json(heads), "tails": _json(tails)}


def enqueue_occurrences(dialect: str, rows: int) -> DriverStatement:
    """INSERT ``rows`` new occurrences of existing jobs unless their key exists
    (parameters: :func:`enqueue_params` and ``now``, None on PostgreSQL for the server's
    clock; at most :data:`MAX_ROWS`).

    The guard is in the statement: a row is inserted only where its job exists (on
    PostgreSQL the job row is held ``FOR KEY SHARE``, so a concurrent delete waits),
    and the unique (job, trigger key) refuses a key that exists or is being inserted
    by another transaction (which then waits for that one to end: two callers of one
    key get one occurrence). Its times are read against the statement's instant.

    Returns, on SQLite, each inserted row (``id``, ``idempotency_key``, ``job_revision``,
    ``available_at``, ``expires_at``, ``now``; ``existing_id`` NULL), whose event the
    caller appends. On PostgreSQL the statement writes the events itself and answers
    every given row: the inserted one's columns, or NULL and the ``existing_id`` of the
    key as the statement's snapshot saw it (NULL too for a key another transaction
    inserted meanwhile, or a job that does not exist): one round trip.

    Sent on the driver (Core's execution of it cost more CPU than the INSERT itself,
    bench/cpu_per_op.py): two statements a dialect, one row and a batch.
    """
    return _statement(dialect, 1 if rows == 1 else 0)


@functools.cache
def _statement(dialect: str, rows: int) -> DriverStatement:
    given = _given(dialect, rows)
    now = StatementNow()
    start = (sa.func.greatest if dialect == "postgresql" else sa.func.max)(
        now + given.c.delay_ms, sa.func.coalesce(given.c.not_before, 0)
    )
    values = {
        "job_id": given.c.job_id,
        "trigger_key": given.c.trigger_key,
        "idempotency_key": given.c.idempotency_key,
        "scheduled_for": start,
        "max_attempts": given.c.max_attempts,
        "max_lost_leases": given.c.max_lost_leases,
        "available_at": start,
        "dispatched_at": sa.case((given.c.hinted, start), else_=sa.null()),
        "queue": given.c.queue,
        "delivery": given.c.delivery,
        "pool": given.c.pool,
        "exclusive": given.c.exclusive,
        "definition": given.c.definition,
        "created_at": now,
        "priority": given.c.priority,
        "links": given.c.links,
        "parent_id": given.c.parent_id,
        "expires_at": sa.func.coalesce(given.c.expires_at, now + given.c.expires_after),
        "rate_limit": given.c.rate_limit,
        "job_revision": jobs.c.revision,
        **{name: sa.literal(value, OCC.c[name].type) for name, value in _CONSTANTS.items()},
        "updated_at": now,
    }
    select = sa.select(*values.values()).where(jobs.c.id == given.c.job_id)
    if dialect == "postgresql":
        select = select.with_for_update(read=True, key_share=True, of=jobs)
    dialect_insert: Any = _INSERTS[dialect](OCC)
    insert = dialect_insert.from_select(list(values), select).on_conflict_do_nothing()
    made = (OCC.c.id, OCC.c.idempotency_key, OCC.c.job_revision, OCC.c.available_at,
            OCC.c.expires_at)  # fmt: skip
    if dialect == "sqlite":
        returning = insert.returning(
            *made, OCC.c.created_at.label("now"), sa.null().label("existing_id")
        )
        return DriverStatement(returning, dialect)
    inserted = insert.returning(
        *made, OCC.c.job_id, OCC.c.trigger_key, OCC.c.priority, OCC.c.parent_id,
        OCC.c.created_at,
    ).cte("made")  # fmt: skip
    existing = OCC.alias("existing")
    answer = (
        sa.select(
            given.c.idempotency_key,
            *(inserted.c[c.name] for c in made if c.name != "idempotency_key"),
            now.label("now"),
            existing.c.id.label("existing_id"),
        )
        .select_from(  # a key's existing row by its firing's unique key (revision 0028)
            given.outerjoin(inserted, inserted.c.idempotency_key == given.c.idempotency_key)
            .outerjoin(existing, (existing.c.job_id == given.c.job_id)
                       & (existing.c.trigger_key == given.c.trigger_key))
        )
        .add_cte(_created_logged(inserted).cte("created_logged"))
    )  # fmt: skip
    return DriverStatement(answer, dialect)


def _created_logged(made: Any, where: Any = None) -> sa.Insert:
    """The ``occurrence_created`` event of each row of ``made`` (the statement's inserted
    rows on PostgreSQL, the occurrences ``where`` picks on SQLite), its data as
    ``kernel.occurrences.rows.enqueued_event`` describes it."""
    data = json_object(
        enqueued=True,
        expires_at=omitted_when(made.c.expires_at.is_(None), made.c.expires_at),
        parent_id=omitted_when(made.c.parent_id.is_(None), made.c.parent_id),
        priority=omitted_when(made.c.priority == 0, made.c.priority),
        revision=made.c.job_revision,
        scheduled_for=made.c.available_at,
        trigger_key=made.c.trigger_key,
    )
    return logged(
        made.c.created_at,
        sa.literal(EventType.OCCURRENCE_CREATED.value),
        made.c.job_id,
        made.c.id,
        sa.null(),
        data,
        where=where,
    )


_MADE_IDS = sa.select(
    sa.func.json_each(sa.bindparam("ids", type_=sa.Text)).table_valued("value").c.value
)
#: On SQLite, whose INSERT cannot write a second table: the events of the occurrences a
#: batch's statement inserted (``ids``: their ids, in order, as one JSON array), in one
#: statement where they were one row each.
LOG_ENQUEUED = DriverStatement(_created_logged(OCC, OCC.c.id.in_(_MADE_IDS)), "sqlite")


#: Rows one statement takes at most (a batch's JSON text stays a few megabytes).
MAX_ROWS = 5000


def enqueue_chunks(rows: int) -> list[tuple[int, int]]:
    """(first row, row count) of each statement enqueuing ``rows`` rows, in order."""
    return [(start, min(MAX_ROWS, rows - start)) for start in range(0, rows, MAX_ROWS)]


#: The one-row statement per dialect (the transition table's; a batch uses
#: :func:`enqueue_occurrences` with its row count).
ENQUEUE_OCCURRENCE = {dialect: enqueue_occurrences(dialect, 1) for dialect in _INSERTS}


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
INSERT_CHORD = {dialect: _insert_chord(insert) for dialect, insert in _INSERTS.items()}
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
