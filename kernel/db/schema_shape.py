"""The schema's fingerprint: the live database's tables, columns, types, indexes and
constraints (CHECKs included) against what the migrations produce, and the migrations'
own checksums.

A shape is a flat map, object → definition (``column occurrences.status`` →
``VARCHAR(32) NOT NULL default None``), read from the catalog in one to three queries:
SQLite's ``sqlite_master`` and ``PRAGMA table_info``, PostgreSQL's ``information_schema``
and ``pg_catalog`` (definitions as the server prints them). ``shape.json`` beside the
migrations holds the shape a fresh database has after them, per dialect, and a SHA-256
of each revision file; ``python -m kernel.migrations.shape URL...`` rewrites it after a new
migration (``tests/kernel/test_schema_shape.py`` says when it is due).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

__all__ = [
    "EXPECTED_FILE",
    "SchemaDrift",
    "compare",
    "edited_migrations",
    "expected_shape",
    "live_shape",
    "migration_checksums",
]

_MIGRATIONS = Path(__file__).parent.parent / "migrations"
EXPECTED_FILE = _MIGRATIONS / "shape.json"
_VERSION_TABLE = "alembic_version"
_CHECK = re.compile(r"\bCHECK\s*\(", re.IGNORECASE)


@dataclass(frozen=True)
class SchemaDrift:
    """How a live shape differs from the expected one (object names, sorted)."""

    missing: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)

    @property
    def breaks(self) -> bool:
        """Whether something the kernel relies on is missing or defined otherwise
        (objects of someone else's beside ours do not break it)."""
        return bool(self.missing or self.different)

    def describe(self) -> str:
        """The differences in one sentence per kind (at most 5 names each)."""
        parts = []
        for what, names in (
            ("missing", self.missing),
            ("different from the migrations'", self.different),
            ("not made by the migrations", self.unexpected),
        ):
            if names:
                more = f" and {len(names) - 5} more" if len(names) > 5 else ""
                parts.append(f"{what}: {', '.join(names[:5])}{more}")
        return "; ".join(parts)


def live_shape(conn: sa.Connection) -> dict[str, str]:
    """The schema as the database holds it (the version table left out)."""
    if conn.dialect.name == "sqlite":
        return _sqlite_shape(conn)
    return _postgresql_shape(conn)


def expected_shape(dialect: str, revision: str) -> dict[str, str] | None:
    """The shape the migrations up to ``revision`` produce on ``dialect``; None when
    ``shape.json`` was written for another revision (a migration added since: the
    shape test fails until it is rewritten, and nothing is compared meanwhile)."""
    document = json.loads(EXPECTED_FILE.read_text())
    if document["revision"] != revision:
        return None
    shape: dict[str, str] | None = document["shapes"].get(dialect)
    return shape


def compare(live: dict[str, str], expected: dict[str, str]) -> SchemaDrift:
    """What ``live`` lacks, holds differently, and holds besides ``expected``; a missing
    table is named alone, not each of its columns and constraints."""
    missing = expected.keys() - live.keys()
    gone = {key.removeprefix("table ") for key in missing if key.startswith("table ")}
    return SchemaDrift(
        missing=sorted(key for key in missing if _table_of(key) not in gone),
        different=sorted(k for k in expected.keys() & live.keys() if live[k] != expected[k]),
        unexpected=sorted(live.keys() - expected.keys()),
    )


def _table_of(key: str) -> str | None:
    """The table a shape key belongs to (``column t.c``, ``check t (...)``); None for a
    table itself or an index (named on its own)."""
    for prefix, end in (
        ("column ", "."),
        ("constraint ", "."),
        ("foreign key ", "."),
        ("check ", " "),
    ):
        if key.startswith(prefix):
            return key.removeprefix(prefix).partition(end)[0]
    return None


def migration_checksums() -> dict[str, str]:
    """SHA-256 of each revision file as it is on disk."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((_MIGRATIONS / "versions").glob("*.py"))
        if not path.name.startswith("__")
    }


def edited_migrations() -> list[str]:
    """Revision files whose checksum differs from the released one, or that it lacks."""
    released: dict[str, str] = json.loads(EXPECTED_FILE.read_text())["checksums"]
    on_disk = migration_checksums()
    return sorted(name for name, digest in on_disk.items() if released.get(name) != digest)


def _text(sql: str) -> str:
    """DDL text without what writers vary in: quotes, spacing, case."""
    flat = " ".join(sql.replace('"', "").replace("`", "").split()).lower()
    return re.sub(r"\s*([(),])\s*", r"\1", flat)


def _checks(table_sql: str) -> list[str]:
    """The CHECK clauses of a ``CREATE TABLE`` text, each with its balanced parentheses."""
    found = []
    for match in _CHECK.finditer(table_sql):
        depth, start = 0, match.end() - 1
        for end in range(start, len(table_sql)):
            depth += {"(": 1, ")": -1}.get(table_sql[end], 0)
            if depth == 0:
                found.append(_text(table_sql[start : end + 1]))
                break
    return found


def _sqlite_shape(conn: sa.Connection) -> dict[str, str]:
    shape: dict[str, str] = {}
    rows = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' AND sql IS NOT NULL"
    ).all()
    for kind, name, table, sql in rows:
        if table == _VERSION_TABLE:
            continue
        if kind != "table":
            shape[f"{kind} {name}"] = _text(sql)
            continue
        shape[f"table {name}"] = "present"
        for _, column, type_, notnull, default, pk in conn.exec_driver_sql(
            f"PRAGMA table_info('{name}')"
        ):
            null = "NOT NULL" if notnull else "NULL"
            shape[f"column {name}.{column}"] = f"{type_} {null} default {default} pk {pk}"
        for check in _checks(sql):
            shape[f"check {name} {check}"] = "present"
        for columns in _unique_keys(conn, name):
            shape[f"constraint {name}.unique({columns})"] = "present"
        for fk in conn.exec_driver_sql(f"PRAGMA foreign_key_list('{name}')"):
            shape[f"foreign key {name}.{fk[3]}"] = f"{fk[2]}.{fk[4]} on delete {fk[6]}"
    return shape


def _unique_keys(conn: sa.Connection, table: str) -> list[str]:
    """The columns of each UNIQUE constraint of a SQLite table, comma-separated. SQLite
    keeps them as automatic indexes, which ``sqlite_master`` lists without their text and
    under names that depend on the order the table's text declares them."""
    return [
        ",".join(column for _, _, column in conn.exec_driver_sql(f"PRAGMA index_info('{index}')"))
        for _, index, _, origin, _ in conn.exec_driver_sql(f"PRAGMA index_list('{table}')")
        if origin == "u"
    ]


def _postgresql_shape(conn: sa.Connection) -> dict[str, str]:
    shape: dict[str, str] = {}
    schema = conn.exec_driver_sql("SELECT current_schema()").scalar_one()
    columns = conn.exec_driver_sql(
        "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable, "
        "column_default FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name <> %(version)s",
        {"version": _VERSION_TABLE},
    ).all()
    for table, column, type_, length, nullable, default in columns:
        shape[f"table {table}"] = "present"
        sized = f"{type_}({length})" if length else type_
        null = "NULL" if nullable == "YES" else "NOT NULL"
        shape[f"column {table}.{column}"] = f"{sized} {null} default {default}"
    for name, definition in conn.exec_driver_sql(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = current_schema() AND tablename <> %(version)s",
        {"version": _VERSION_TABLE},
    ):
        shape[f"index {name}"] = definition.replace(f" ON {schema}.", " ON ")
    for table, name, definition in conn.exec_driver_sql(
        "SELECT rel.relname, con.conname, pg_get_constraintdef(con.oid) "
        "FROM pg_constraint con JOIN pg_class rel ON rel.oid = con.conrelid "
        "WHERE rel.relnamespace = current_schema()::regnamespace AND rel.relname <> %(version)s",
        {"version": _VERSION_TABLE},
    ):
        shape[f"constraint {table}.{name}"] = definition
    return shape
