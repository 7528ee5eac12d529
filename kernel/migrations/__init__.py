"""Alembic revisions of the kernel schema; run through :func:`kernel.migrate`."""
