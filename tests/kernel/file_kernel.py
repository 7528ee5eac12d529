"""A SQLite kernel in a file of its own, with one callable job: for the tests of what
SQLite does with its files (the WAL and its syncs)."""

from __future__ import annotations

from pathlib import Path

from kernel import Kernel


def file_kernel(path: Path, max_queued: int) -> Kernel:
    """A migrated kernel at ``path`` defining ``job`` (overlap allowed, ``max_queued``)."""
    kernel = Kernel.open(f"sqlite:///{path}", migrate_schema=True)
    kernel.define_job(
        {
            "id": "job",
            "kind": "callable",
            "payload": {"callable": "jobs.sample:run"},
            "overlap": "allow",
            "max_queued": max_queued,
        }
    )
    return kernel
