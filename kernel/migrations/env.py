"""Alembic environment: runs on the connection the kernel hands over in ``config.attributes``."""

from __future__ import annotations

import logging

from alembic import context

from kernel.db.schema import metadata

# Every worker and Beat migrates at start; alembic's per-run INFO chatter is noise there.
logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)
connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
