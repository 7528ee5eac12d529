"""A job's ownership by its source: recorded by SOURCE_OWNS_JOBS, retired and restored by
the source's listing, forgotten with the job by retention (RETENTION_FORGETS_JOB_SOURCE)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from kernel.db.schema import job_sources

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _owned(k: Harness) -> dict[str, tuple[str, str, bool]]:
    """job id -> (source, entry name, retired)."""
    with k.kernel.engine.connect() as conn:
        rows = conn.execute(sa.select(job_sources)).all()
    return {r.job_id: (r.source, r.name, r.retired_at is not None) for r in rows}


def test_a_source_owns_what_it_lists_until_retention_deletes_the_job(k: Harness) -> None:
    k.define("a")
    k.define("b", ttl="1d")
    k.kernel.sync_job_source("file", {"a": "A", "b": "B", "never-applied": "N"})
    assert _owned(k) == {"a": ("file", "A", False), "b": ("file", "B", False)}

    retired = k.kernel.sync_job_source("file", {"a": "A2"})
    assert (retired.retired, retired.restored) == (["b"], [])
    assert _owned(k) == {"a": ("file", "A2", False), "b": ("file", "B", True)}
    assert not k.kernel.get_job("b").enabled

    restored = k.kernel.sync_job_source("file", {"a": "A2", "b": "B2"})
    assert (restored.retired, restored.restored) == ([], ["b"])
    assert _owned(k)["b"] == ("file", "B2", False)

    k.kernel.set_job_enabled("b", False)
    k.clock.advance(2 * 86400.0)
    assert k.kernel.apply_retention({})["jobs"] == ["b"]
    assert _owned(k) == {"a": ("file", "A2", False)}
