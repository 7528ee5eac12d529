"""Driver and OS errors to kernel errors, in one place: by SQLSTATE / SQLite name and constraint.

Nothing raised by the driver crosses the kernel boundary as itself: storage
failures become STORAGE_UNAVAILABLE with the phase they happened in and the
driver's code; a constraint refusal becomes the domain error its name stands for.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Literal, TypeVar

import sqlalchemy as sa

from kernel.errors import (
    CommitState,
    KernelError,
    PermissionDenied,
    StateConflict,
    StorageUnavailable,
)
from kernel.redaction import masked_url

__all__ = ["Phase", "guard", "translate", "connection_lost", "constraint_name"]

R = TypeVar("R")

#: Where a storage failure happened: reaching the database, running the
#: statements, or committing them.
Phase = Literal["open", "write", "commit"]

# sqlite3 error names that mean the storage itself failed (SPEC I8).
_SQLITE_STORAGE = (
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_READONLY",
    "SQLITE_CANTOPEN",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
)

# SQLite names a CHECK in its message; a unique index only by its columns.
_SQLITE_CONSTRAINT = re.compile(r"(?:CHECK|UNIQUE) constraint failed: (\S+)")


#: What each constraint of the schema (kernel/db/schema.py) stands for, in words a person
#: can act on; a name not listed is reported as it is.
_CONSTRAINT_MEANINGS = {
    "ck_occurrences_status": "an occurrence's status must be one the kernel knows",
    "ck_occurrences_lease_iff_running": (
        "exactly the running occurrences hold a lease (owner and expiry)"
    ),
    "ck_occurrences_no_waiting_cancel": (
        "a queued or retry_wait occurrence cannot carry a pending cancel (it must end cancelled)"
    ),
    "ck_occurrences_settled_iff_final": (
        "an occurrence has a settled time exactly when it succeeded, dead-lettered, was "
        "cancelled or skipped"
    ),
    "ck_occurrences_counters": "fence and attempt cannot be negative, max_attempts is at least 1",
    "ck_controls_state": "a runtime control's state must be one the kernel knows",
    "ck_pools_counters": "a pool's running count cannot go below 0 and its limit is at least 1",
    "occurrences_one_running_exclusive": (
        "another occurrence of this job (overlap queue/replace) is already running"
    ),
    "occurrences_job_trigger": "this firing of the job already has an occurrence",
}


def connection_lost(exc: BaseException) -> bool:
    return isinstance(exc, sa.exc.DBAPIError) and bool(exc.connection_invalidated)


def constraint_name(exc: BaseException) -> str | None:
    """The violated constraint's name, when the driver says (PostgreSQL) or the text does."""
    orig = getattr(exc, "orig", exc)
    diag = getattr(orig, "diag", None)
    name = getattr(diag, "constraint_name", None)
    if name:
        return str(name)
    found = _SQLITE_CONSTRAINT.search(str(orig))
    return found.group(1) if found else None


def _driver_code(orig: BaseException) -> str | None:
    if isinstance(orig, sqlite3.Error):
        return getattr(orig, "sqlite_errorname", None) or None
    code = getattr(orig, "sqlstate", None)
    return str(code) if code else None


def translate(
    exc: BaseException, *, phase: Phase, url: sa.URL, dialect: str | None = None
) -> KernelError | BaseException:
    """The kernel error for ``exc``; anything unrecognised (a bug) is returned unchanged.

    A storage failure names the database ``url`` (password hidden).

    A failure during COMMIT on PostgreSQL may have landed: its ``commit_state``
    is ``unknown``. SQLite reports a COMMIT it refused synchronously, so it did not.
    """
    orig = getattr(exc, "orig", exc)
    if getattr(orig, "sqlstate", None) == _INSUFFICIENT_PRIVILEGE:
        return _permission_denied(orig, url)
    if isinstance(exc, sa.exc.IntegrityError):
        # The schema refused a state it makes unrepresentable (0002's CHECKs) or a
        # duplicate key: the change raced another one or would break an invariant.
        name = constraint_name(exc)
        meaning = _CONSTRAINT_MEANINGS.get(name or "")
        what = f"{name}: {meaning}" if meaning else (name or str(orig))
        return StateConflict(
            f"the change was refused by the database constraint {what}; another change "
            "probably moved first: re-read the object and try again",
            constraint=name,
        )
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorname", "")
        if not any(code.startswith(known) for known in _SQLITE_STORAGE):
            return exc
        detail = f"{code}: {orig}"
    elif isinstance(orig, OSError):
        detail = f"{orig.__class__.__name__}: {orig}"
    # 25006: a read-only server (hot standby, default_transaction_read_only) refused
    # the write; psycopg files it under InternalError, yet it is storage, not a bug.
    elif (
        isinstance(exc, sa.exc.OperationalError)
        or connection_lost(exc)
        or getattr(orig, "sqlstate", None) == "25006"
    ):
        text = str(orig).strip()
        detail = text.splitlines()[0] if text else orig.__class__.__name__
    else:
        return exc
    commit_state: CommitState = "not_committed"
    if phase == "commit" and (dialect != "sqlite" or connection_lost(exc)):
        commit_state = "unknown"
    database = masked_url(url.render_as_string(hide_password=False))
    return StorageUnavailable(
        f"the kernel database {database} is unavailable while {_DOING[phase]} "
        f"({masked_url(detail)}); "
        "the change was "
        + (
            "not committed"
            if commit_state == "not_committed"
            else "perhaps committed: check before retrying"
        ),
        commit_state=commit_state,
        phase=phase,
        driver_code=_driver_code(orig),
        database=database,
    )


_DOING = {"open": "opening it", "write": "writing", "commit": "committing"}
_INSUFFICIENT_PRIVILEGE = "42501"


def _permission_denied(orig: BaseException, url: sa.URL) -> PermissionDenied:
    """A grant the connecting role lacks: the statement (and its transaction) did nothing."""
    text = str(orig).strip()
    refused = masked_url(text.splitlines()[0]) if text else "permission denied"
    database = masked_url(url.render_as_string(hide_password=False))
    return PermissionDenied(
        f"the database role {url.username!r} may not do this ({refused}); nothing was "
        f"changed. Connect as a role granted it (docs/postgres-roles.sql) or ask the "
        f"owner of {database} to grant it",
        role=url.username,
        refused=refused,
        driver_code=_INSUFFICIENT_PRIVILEGE,
        database=database,
    )


def guard(fn: Callable[[sa.Engine], R], engine: sa.Engine) -> R:
    """Run ``fn(engine)`` (no transaction of ours: schema checks, migrations)."""
    try:
        return fn(engine)
    except KernelError:
        raise
    except (sa.exc.DBAPIError, OSError) as exc:
        raise translate(exc, phase="open", url=engine.url, dialect=engine.dialect.name) from exc
