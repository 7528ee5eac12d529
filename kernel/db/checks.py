"""The CHECK constraints of the kernel's tables (:mod:`kernel.db.schema`), as (name,
condition) pairs: the invariants the database itself enforces, so a bad state cannot be
written by any path. The migrations that added them spell their own copies, as a
migration must not change when the schema moves on.
"""

from __future__ import annotations

__all__ = [
    "ADJUDICATION_ASK_CHECKS",
    "CONTROL_CHECKS",
    "NOTIFICATION_CHECKS",
    "OCCURRENCE_CHECKS",
    "OCCURRENCE_CHECKS_POSTGRESQL",
    "POOL_CHECKS",
]

OCCURRENCE_CHECKS: tuple[tuple[str, str], ...] = (
    (
        "ck_occurrences_status",
        "status IN ('queued', 'running', 'retry_wait', 'succeeded', 'dead_letter',"
        " 'needs_adjudication', 'cancelled', 'skipped', 'awaiting_approval')",
    ),
    (
        "ck_occurrences_lease_iff_running",
        "(status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)"
        " OR (status <> 'running' AND lease_owner IS NULL AND lease_expires_at IS NULL)",
    ),
    (
        "ck_occurrences_no_waiting_cancel",
        "NOT (cancel_requested AND status IN ('queued', 'retry_wait'))",
    ),
    (
        "ck_occurrences_settled_iff_final",
        "(status IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NOT NULL)"
        " OR (status NOT IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NULL)",
    ),
    ("ck_occurrences_counters", "fence >= 0 AND attempt >= 0 AND max_attempts >= 1"),
)
#: OCCURRENCE_CHECKS as PostgreSQL stores them (revision 0026): the same conditions, decided
#: alike on every row (tests/kernel/test_occurrence_checks.py), in smaller parse trees.
#: PostgreSQL parses and plans each stored check again in every statement that writes a
#: row; an ``IN`` list of a VARCHAR column is stored as an array of casts, a text array
#: literal as one constant. ``status`` and ``cancel_requested`` are NOT NULL, so each
#: equality of two conditions is true or false, as the portable AND/OR forms are.
#: (SQLite compiles the checks into each prepared statement: it keeps the portable forms.)
OCCURRENCE_CHECKS_POSTGRESQL: tuple[tuple[str, str], ...] = (
    (
        "ck_occurrences_status",
        "status::text = ANY ('{queued,running,retry_wait,succeeded,dead_letter,"
        "needs_adjudication,cancelled,skipped,awaiting_approval}'::text[])",
    ),
    (
        "ck_occurrences_lease_iff_running",
        "(lease_owner IS NULL) = (lease_expires_at IS NULL)"
        " AND (lease_owner IS NULL) = (status::text <> 'running')",
    ),
    (
        "ck_occurrences_no_waiting_cancel",
        "NOT (cancel_requested AND status::text = ANY ('{queued,retry_wait}'::text[]))",
    ),
    (
        "ck_occurrences_settled_iff_final",
        "(settled_at IS NULL)"
        " <> (status::text = ANY ('{succeeded,dead_letter,cancelled,skipped}'::text[]))",
    ),
    ("ck_occurrences_counters", "fence >= 0 AND attempt >= 0 AND max_attempts >= 1"),
)
CONTROL_CHECKS: tuple[tuple[str, str], ...] = (
    ("ck_controls_state", "state IN ('pause_requested', 'paused', 'resumed', 'terminal')"),
)
POOL_CHECKS: tuple[tuple[str, str], ...] = (("ck_pools_counters", 'running >= 0 AND "limit" >= 1'),)
ADJUDICATION_ASK_CHECKS: tuple[tuple[str, str], ...] = (
    ("ck_adjudication_asks_state", "state IN ('asking', 'cannot_tell')"),
)
NOTIFICATION_CHECKS: tuple[tuple[str, str], ...] = (
    (
        "ck_notifications_state",
        "state IN ('pending', 'delivering', 'delivered', 'failed')",
    ),
)
