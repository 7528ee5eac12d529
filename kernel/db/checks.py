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
