"""Schema verification by fingerprint: a migrated database matches ``shape.json``; one
altered by hand (an index or a unique key dropped, a CHECK weakened, a table missing) is
refused at start and named by ``doctor``; an edited migration is caught by its checksum."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernel.db import schema_shape
from kernel.db.engine import HEAD_REVISION, create_kernel_engine
from kernel.db.schema_shape import compare, edited_migrations, expected_shape, live_shape
from kernel.errors import SchemaUnknown
from kernel.store import Kernel
from kernel.upkeep.checkup import schema_fingerprint
from tests.kernel.conftest import Harness

REWRITE = (
    "migrations changed: rewrite kernel/migrations/shape.json (python -m kernel.migrations.shape)"
)


def test_shape_json_describes_the_head_and_its_released_migrations() -> None:
    document = json.loads(schema_shape.EXPECTED_FILE.read_text())
    assert document["revision"] == HEAD_REVISION, REWRITE
    assert edited_migrations() == [], REWRITE


def test_a_migrated_database_has_exactly_the_expected_shape(k: Harness) -> None:
    with k.kernel.engine.connect() as conn:
        live = live_shape(conn)
    expected = expected_shape(k.kernel.engine.dialect.name, HEAD_REVISION)
    assert expected is not None, REWRITE
    assert live == expected
    assert [(f.name, f.status) for f in k.kernel.checkup()][0] == ("schema", "ok")


def _alter(url: str, *statements: str) -> None:
    engine = create_kernel_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _weaken_a_check(backend: str) -> tuple[str, ...]:
    if backend == "postgresql":
        return (
            "ALTER TABLE pools DROP CONSTRAINT ck_pools_counters",
            "ALTER TABLE pools ADD CONSTRAINT ck_pools_counters CHECK (running >= -1)",
        )
    # SQLite alters a CHECK only by rebuilding the table, as a hand edit would.
    return (
        'CREATE TABLE pools_new (name VARCHAR(128) NOT NULL PRIMARY KEY, "limit" INTEGER NOT '
        "NULL, running INTEGER NOT NULL DEFAULT '0', CHECK (running >= -1))",
        "DROP TABLE pools",
        "ALTER TABLE pools_new RENAME TO pools",
    )


def _drop_a_unique_key(url: str, backend: str) -> tuple[str, ...]:
    """``notifications``' unique (occurrence_id, fence, event) dropped by hand."""
    if backend == "postgresql":
        return ("ALTER TABLE notifications DROP CONSTRAINT notifications_run_event",)
    # SQLite drops a table's UNIQUE only by rebuilding the table, as a hand edit would.
    engine = create_kernel_engine(url)
    try:
        with engine.connect() as conn:
            table, *indexes = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'notifications'"
                " AND sql IS NOT NULL ORDER BY type = 'index'"
            ).scalars()
    finally:
        engine.dispose()
    without = re.sub(r",\s*CONSTRAINT \w+ UNIQUE \([^)]*\)", "", table)
    assert without != table
    return (
        re.sub(r'^CREATE TABLE "?notifications"?', "CREATE TABLE notifications_new", without),
        "INSERT INTO notifications_new SELECT * FROM notifications",
        "DROP TABLE notifications",
        "ALTER TABLE notifications_new RENAME TO notifications",
        *indexes,
    )


@pytest.mark.parametrize(
    "alteration", ["drop_index", "weaken_check", "drop_table", "drop_unique_key"]
)
def test_a_hand_altered_schema_is_refused_at_start_and_named_by_doctor(
    k: Harness, alteration: str
) -> None:
    backend = k.kernel.engine.dialect.name
    k.kernel.close()
    statements = {
        "drop_index": ("DROP INDEX occurrences_claimable",),
        "weaken_check": _weaken_a_check(backend),
        "drop_table": ("DROP TABLE adjudication_asks",),
        "drop_unique_key": (),
    }[alteration] or _drop_a_unique_key(k.url, backend)
    named = {
        "drop_index": "index occurrences_claimable",
        "weaken_check": "pools",
        "drop_table": "table adjudication_asks",
        "drop_unique_key": {
            "postgresql": "constraint notifications.notifications_run_event",
            "sqlite": "constraint notifications.unique(occurrence_id,fence,event)",
        }[backend],
    }[alteration]
    _alter(k.url, *statements)

    with pytest.raises(SchemaUnknown) as refused:
        Kernel.open(k.url, clock=k.clock)
    assert named in refused.value.message
    assert "differs from what the migrations make" in refused.value.message

    engine = create_kernel_engine(k.url)
    try:
        finding = schema_fingerprint(engine)
    finally:
        engine.dispose()
    assert finding.status == "fail" and named in finding.detail


def test_an_object_of_someone_else_is_only_a_warning(k: Harness) -> None:
    _alter(k.url, "CREATE INDEX someone_elses ON events (at)")
    reopened = Kernel.open(k.url, clock=k.clock)  # still starts
    try:
        (finding,) = [f for f in reopened.checkup() if f.name == "schema"]
    finally:
        reopened.close()
    assert finding.status == "warn" and "index someone_elses" in finding.detail


def test_an_edited_migration_is_caught_by_its_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = json.loads(schema_shape.EXPECTED_FILE.read_text())
    first = sorted(document["checksums"])[0]
    document["checksums"][first] = "0" * 64  # as if the file on disk had been edited since
    edited = tmp_path / "shape.json"
    edited.write_text(json.dumps(document))
    monkeypatch.setattr(schema_shape, "EXPECTED_FILE", edited)
    assert edited_migrations() == [first]
    monkeypatch.setattr("kernel.upkeep.checkup.EXPECTED_FILE", edited)
    monkeypatch.setattr("kernel.upkeep.checkup.edited_migrations", edited_migrations)
    engine = create_kernel_engine(f"sqlite:///{tmp_path / 'k.db'}")
    try:
        finding = schema_fingerprint(engine)
    finally:
        engine.dispose()
    assert finding.status == "fail" and first in finding.detail


def test_compare_names_what_is_missing_different_and_extra() -> None:
    drift = compare({"a": "1", "b": "2", "x": "9"}, {"a": "1", "b": "3", "c": "4"})
    assert (drift.missing, drift.different, drift.unexpected) == (["c"], ["b"], ["x"])
    assert drift.breaks
    assert not compare({"a": "1", "x": "2"}, {"a": "1"}).breaks
