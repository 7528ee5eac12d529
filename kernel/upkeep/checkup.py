"""What ``kernel doctor`` asks the kernel: findings about its storage that no operation
would refuse on its own (files open to other users, secrets stored in clear).

Each finding is a check's name, ``ok`` / ``warn`` / ``fail`` and a sentence a person
can act on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from kernel.db.engine import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, schema_drift, sqlite_file
from kernel.db.schema_shape import EXPECTED_FILE, edited_migrations
from kernel.spec.jobspec import stored_secrets
from kernel.types import Job

__all__ = ["Finding", "file_modes", "schema_fingerprint", "secrets_in_clear", "unplannable"]

#: SQLite's companions of a database file, which hold its recent writes.
_SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``status`` is ``ok``, ``warn`` or ``fail``."""

    name: str
    status: str
    detail: str


def file_modes(engine: sa.Engine) -> Finding:
    """Whether the SQLite database, its WAL/SHM files and its folder are private."""
    database = sqlite_file(engine.url)
    if database is None:
        return Finding("file modes", "ok", "no database file (not SQLite)")
    path = Path(database)
    wanted = [(path.parent, PRIVATE_DIR_MODE)]
    wanted += [(Path(f"{path}{suffix}"), PRIVATE_FILE_MODE) for suffix in _SQLITE_COMPANIONS]
    wide = [
        f"{where} is {mode:04o} (chmod {private:o} {where})"
        for where, private in wanted
        if (mode := _mode(where)) is not None and mode & ~private & 0o777
    ]
    if wide:
        return Finding("file modes", "warn", "open to other users of this host: " + "; ".join(wide))
    return Finding("file modes", "ok", f"{path} and its folder are private to their owner")


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def secrets_in_clear(jobs: Iterable[Job]) -> Finding:
    """Jobs stored (before such values were refused) with secret-looking ``env`` values or
    headers: the value sits in clear in the database until the job is re-applied."""
    found = [
        f"{job.id} ({', '.join(p.field for p in problems)})"
        for job in jobs
        if (problems := stored_secrets(job.spec["payload"]))
    ]
    if found:
        return Finding(
            "stored secrets",
            "warn",
            "values that look like secrets are stored in clear; move them to secrets: / "
            "secret_headers: and re-apply: " + "; ".join(found),
        )
    return Finding("stored secrets", "ok", "no job stores a secret-looking value")


def unplannable(found: Iterable[dict[str, Any]]) -> Finding:
    """Enabled jobs whose current revision Beat cannot plan (``Kernel.status``'s
    ``unplannable``): none of their firings is made until the job is revised."""
    listed = [f"{j['job_id']} (revision {j['revision']}): {j['error']}" for j in found]
    if listed:
        return Finding(
            "schedules",
            "fail",
            "Beat cannot plan these jobs and fires none of their runs; fix the schedule "
            "and re-apply: " + "; ".join(listed),
        )
    return Finding("schedules", "ok", "Beat plans every enabled job")


def schema_fingerprint(engine: sa.Engine) -> Finding:
    """The live schema against what the migrations make, and the migrations against the
    checksums they were released with."""
    edited = edited_migrations()
    if edited:
        return Finding(
            "schema",
            "fail",
            f"migration files differ from the released ones (checksums in {EXPECTED_FILE.name}): "
            f"{', '.join(edited)}; a database they migrated may not be the kernel's schema",
        )
    with engine.connect().execution_options(kernel_read_only=True) as conn:
        drift = schema_drift(conn)
    if drift is None:
        return Finding(
            "schema",
            "warn",
            f"{EXPECTED_FILE.name} does not describe this release's head revision: "
            "nothing compared (rewrite it with `python -m kernel.migrations.shape`)",
        )
    if drift.breaks:
        return Finding("schema", "fail", f"differs from the migrations: {drift.describe()}")
    if drift.unexpected:
        return Finding("schema", "warn", f"holds objects besides the kernel's: {drift.describe()}")
    return Finding(
        "schema", "ok", "tables, columns, indexes and CHECKs as the migrations made them"
    )
