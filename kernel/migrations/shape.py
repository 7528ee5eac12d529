"""Rewrite ``shape.json`` after a new migration: ``python -m kernel.migrations.shape
SQLITE_URL POSTGRESQL_URL`` (tests/kernel/test_schema_shape.py says when it is due).
It stands above :mod:`kernel.db.engine` and :mod:`kernel.db.schema_shape`, whose pieces it
runs, so neither imports the other back."""

from __future__ import annotations

import json
import sys
from typing import Any

from kernel.db.engine import HEAD_REVISION, create_kernel_engine, migrate
from kernel.db.schema_shape import EXPECTED_FILE, live_shape, migration_checksums

__all__ = ["write_shapes"]


def write_shapes(urls: list[str]) -> None:
    """Migrate a fresh database at each URL (one SQLite, one PostgreSQL) and store the
    shapes they have, with the revisions' checksums, in ``shape.json``."""
    shapes = {}
    for url in urls:
        engine = create_kernel_engine(url)
        try:
            migrate(engine)
            with engine.connect() as conn:
                shapes[engine.dialect.name] = dict(sorted(live_shape(conn).items()))
        finally:
            engine.dispose()
    document: dict[str, Any] = {
        "revision": HEAD_REVISION,
        "checksums": migration_checksums(),
        "shapes": shapes,
    }
    EXPECTED_FILE.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    write_shapes(sys.argv[1:])
