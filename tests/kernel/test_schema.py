"""Schema revisions, migration, and the plan of the hot path's settle on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql
from servers import libpq_url
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg
from sqlalchemy.sql.compiler import SQLCompiler

from kernel import statements as st
from kernel.db.engine import HEAD_REVISION, _alembic_config, create_kernel_engine
from kernel.db.schema import metadata
from kernel.errors import SchemaUnknown
from kernel.store import Kernel
from kernel.testing import ManualClock

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_an_unmigrated_database_is_refused_until_migrated(kernel_url: str) -> None:
    with pytest.raises(SchemaUnknown) as refused:
        Kernel.open(kernel_url, clock=ManualClock())
    assert "kernel migrate" in refused.value.message and refused.value.details["revision"] is None
    engine = create_kernel_engine(kernel_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE someone_elses (id INTEGER PRIMARY KEY)"))
    finally:
        engine.dispose()
    with pytest.raises(SchemaUnknown) as foreign:
        Kernel.open(kernel_url, clock=ManualClock())
    assert "tables of something else" in foreign.value.message

    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        assert kernel.list_jobs() == []
    finally:
        kernel.close()


def test_a_newer_unknown_revision_is_refused(k: Harness) -> None:
    with k.kernel.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'ffff'"))
    with pytest.raises(SchemaUnknown) as refused:
        Kernel.open(k.url, clock=ManualClock())
    assert "ffff" in refused.value.message and "newer release" in refused.value.message
    assert refused.value.details == {"revision": "ffff", "expected": HEAD_REVISION}
    with pytest.raises(SchemaUnknown):
        Kernel.open(k.url, migrate_schema=True, clock=ManualClock())
    # A pool process whose worker checked the database at start does not check it again.
    Kernel.open(k.url, check_schema=False, clock=ManualClock()).close()


def test_head_revision_is_alembic_head() -> None:
    assert ScriptDirectory.from_config(_alembic_config()).get_current_head() == HEAD_REVISION


OPEN_AND_CLAIM = """
import sys
from kernel import Kernel
kernel = Kernel.open(sys.argv[1], migrate_schema=True)
kernel.claim(1, owner="probe")
kernel.close()
print("alembic" in sys.modules)
"""


def test_opening_a_current_schema_does_not_load_alembic(k: Harness) -> None:
    """A worker's processes open the kernel at every start: alembic costs ~9 MB in each."""
    opened = subprocess.run(
        [sys.executable, "-c", OPEN_AND_CLAIM, k.url], capture_output=True, text=True, timeout=60
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "False"


def test_migrating_twice_is_a_no_op_and_matches_the_tables(k: Harness) -> None:
    [occ_id] = k.occurrences()
    assert k.kernel.migrate() == (HEAD_REVISION, HEAD_REVISION)
    again = Kernel.open(k.url, migrate_schema=True, clock=k.clock)
    try:
        assert again.get_occurrence(occ_id).status == "queued"
    finally:
        again.close()
    with k.kernel.engine.connect() as conn, warnings.catch_warnings():
        if k.backend == "sqlite":
            # SQLAlchemy cannot reflect SQLite's expression index (occurrences_settled_by_status),
            # so alembic skips it, saying so; shape.json holds its SQL on both back ends.
            warnings.filterwarnings("ignore", "Skipped unsupported reflection of expression")
            skipped = "autogenerate skipping .*'occurrences_settled_by_status'"
            warnings.filterwarnings("ignore", skipped)
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []


RUNNING_ROWS = 2_000


def _explain_settle(url: str, occ_id: int, now: int) -> str:
    """EXPLAIN the SETTLE statement's generic plan, as psycopg's auto-prepare would run it."""
    # Numbered placeholders: the statement as the server prepares it, binds and all.
    dialect = pg_psycopg.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]
    compiled = st.SETTLE.statement.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    given: dict[str, Any] = {
        "occurrence_id": occ_id,
        "owner": f"w-{occ_id}",
        "held_fence": 1,
        "now": now,
        "to_status": "succeeded",
        "next_available_at": now,
        "result_json": "null",
        "error_json": None,
        "settled": now,
    }
    names = list(dict.fromkeys(compiled.positiontup or ()))
    values = [given[n] if n in given else compiled.params[n] for n in names]
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(sql.SQL("PREPARE settle AS {}").format(sql.SQL(compiled.string)))
        explain = sql.SQL("EXPLAIN EXECUTE settle({})").format(
            sql.SQL(", ").join(sql.Literal(v) for v in values)
        )
        return "\n".join(row[0] for row in conn.execute(explain))


def test_settle_by_id_stays_a_primary_key_lookup_with_many_rows_in_flight(
    pg_database_url: str,
) -> None:
    """GUIDE perf note: a generic plan must not turn settle-by-id into a scan of running rows."""
    clock = ManualClock()
    kernel = Kernel.open(pg_database_url, migrate_schema=True, clock=clock)
    try:
        kernel.define_job(
            {"id": "job", "kind": "callable", "payload": {"callable": "a:b"}, "overlap": "allow"}
        )
        template = kernel.run_now(
            "job", request_id="seed", operator="test", force=True
        ).occurrence.id
        with kernel.engine.begin() as conn:
            conn.execute(
                sa.text(
                    """
                    INSERT INTO occurrences (job_id, job_revision, trigger_key, idempotency_key,
                        scheduled_for, status, attempt, max_attempts, fence, lease_owner,
                        lease_expires_at, available_at, queue, kind, delivery, exclusive, pool,
                        definition, cancel_requested, chain_depth, created_at, updated_at)
                    SELECT job_id, job_revision, 'bulk:' || g, 'bulk:' || g, scheduled_for,
                        'running', 1, max_attempts, 1, 'w-' || g, available_at + 30000,
                        available_at, queue, kind, delivery, exclusive, pool, definition, false,
                        0, created_at, updated_at
                    FROM occurrences, generate_series(1, :n) AS g WHERE id = :template
                    """
                ),
                {"n": RUNNING_ROWS, "template": template},
            )
            conn.execute(sa.text("ANALYZE occurrences"))
            target = conn.execute(sa.text("SELECT max(id) FROM occurrences")).scalar_one()
    finally:
        kernel.close()
    plan = _explain_settle(pg_database_url, target, int(clock.now.timestamp() * 1000))
    assert "Index Scan using occurrences_pkey" in plan, plan
    assert "Seq Scan on occurrences" not in plan and "Bitmap" not in plan, plan
    assert "occurrences_running" not in plan, plan
