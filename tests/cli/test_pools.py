"""``kernel pools set|list``, a job file's ``pools:``, pool gauges and ``why`` on a full pool."""

from __future__ import annotations

import json
from pathlib import Path

from cli.support import define, job, write

from celery_app.cli.exporter import KernelCollector
from celery_app.operations import nearest_firing
from kernel import Kernel


def _pools(cli) -> dict[str, dict[str, object]]:
    result = cli("pools", "list", "--json")
    assert result.code == 0, result.out + result.err
    return {p["name"]: p for p in result.json()}


def _limit_events(kernel: Kernel) -> list[dict[str, object]]:
    return [e.data for e in kernel.events(limit=1000) if e.type == "pool_limit_set"]


def test_set_and_list_with_running_and_waiting_counts(cli, kernel: Kernel) -> None:
    define(kernel, "a", pool="db", overlap="allow")
    define(kernel, "b", pool="gpu")
    occ = [kernel.run_now("a", request_id=f"a{n}", operator="t").occurrence.id for n in range(3)]
    kernel.run_now("b", request_id="b0", operator="t")
    assert kernel.claim(occ[0], owner="w", lease=60) is not None
    assert kernel.claim(occ[1], owner="w", lease=60) is None  # undefined pool: limit 1

    # Jobs name "gpu" and nothing defines it: listed with the default limit.
    assert _pools(cli) == {
        "db": {"name": "db", "limit": 1, "running": 1, "waiting": 2, "defined": True},
        "gpu": {"name": "gpu", "limit": 1, "running": 0, "waiting": 1, "defined": False},
    }
    set_db = cli("pools", "set", "db", "--limit", "2", "--json")
    assert set_db.code == 0, set_db.err
    assert set_db.json() == {
        "pool": {"name": "db", "limit": 2, "running": 1, "waiting": 2, "defined": True},
        "changed": True,
    }
    assert cli("pools", "set", "db", "--limit", "2", "--json").json()["changed"] is False
    assert kernel.claim(occ[1], owner="w", lease=60) is not None
    assert kernel.claim(occ[2], owner="w", lease=60) is None
    assert _limit_events(kernel) == [{"pool": "db", "limit": 2}]
    text = cli("pools", "list").out
    assert text.splitlines()[0].split() == ["POOL", "LIMIT", "RUNNING", "WAITING", "DEFINED"]
    assert text.splitlines()[1].split() == ["db", "2", "2", "1", "yes"]
    assert (
        "pool db: limit 2 (unchanged), 2 running, 1 waiting"
        in cli("pools", "set", "db", "--limit", "2").out
    )


def test_bad_limits_and_names_are_refused_with_a_code(cli, kernel: Kernel) -> None:
    for args, says in (
        (("db", "--limit", "0"), "limit: must be a whole number from 1 to 1000000, not 0"),
        (("no spaces", "--limit", "2"), "is not a pool name"),
    ):
        result = cli("pools", "set", *args)
        assert result.code == 1
        assert result.err.startswith("Error INVALID_ARGUMENT") and says in result.err
        assert "Traceback" not in result.err
    assert _pools(cli) == {}


def test_a_job_files_pools_are_applied_with_its_jobs(cli, kernel: Kernel, tmp_path: Path) -> None:
    file = write(
        tmp_path / "jobs.json",
        json.dumps({"pools": {"db": {"limit": 3}}, "jobs": [job("a", pool="db")]}),
    )
    applied = cli("jobs", "apply", str(file), "--json")
    assert applied.code == 0, applied.err
    assert applied.json()["pools"] == {"db": 3}
    assert "pool limits set: db 3" in cli("jobs", "apply", str(file)).out
    assert _pools(cli)["db"]["limit"] == 3
    assert _limit_events(kernel) == [{"pool": "db", "limit": 3}]  # unchanged the second time

    bad = write(
        tmp_path / "bad.yaml",
        "pools:\n  db: {limit: 0}\n  gpu: 2\njobs:\n  - {id: b, kind: nope}\n",
    )
    refused = cli("jobs", "apply", str(bad), "--json")
    assert refused.code == 1
    error = json.loads(refused.out or refused.err)["error"]
    assert [e["field"] for e in error["details"]["errors"]] == [
        "pools.db.limit",
        "pools.gpu",
        "jobs[0].kind",  # no adapter runs "nope": said in the same round
        "jobs[0].payload",
    ]
    assert "1 invalid job(s), 4 problem(s), nothing applied" in error["message"]
    assert _pools(cli)["db"]["limit"] == 3


def test_pool_gauges_and_why_a_waiting_occurrence_does_not_run(cli, kernel: Kernel) -> None:
    define(kernel, "a", pool="db", overlap="allow")
    first = kernel.run_now("a", request_id="r", operator="t").occurrence.id
    kernel.claim(first, owner="w", lease=60)
    job = kernel.get_job("a")
    firing = nearest_firing(
        job.spec["schedule"], job.spec["dst"], job.defined_at, anchor=job.defined_at
    )
    assert firing is not None
    at = firing.at
    kernel.fire(
        "a",
        expected_revision=job.revision,
        expected_cursor=None,
        firings=[(firing.trigger_key, at)],
        missed=[],
        missed_reason="catchup_latest",
        next_cursor=None,
    )
    [second] = [o.id for o in kernel.list_occurrences(job_id="a", statuses=["queued"])]
    gauges = {
        (m.name, s.labels.get("pool")): s.value
        for m in KernelCollector(kernel, beat_retention_s=60).collect()
        if m.name.startswith("celery_kernel_pool_")
        for s in m.samples
    }
    assert gauges == {
        ("celery_kernel_pool_limit", "db"): 1,
        ("celery_kernel_pool_running", "db"): 1,
        ("celery_kernel_pool_waiting", "db"): 1,
    }
    why = cli("why", "a", "--at", at.isoformat(), "--json").json()
    assert why["occurrence"]["id"] == second
    assert why["reason"] == (
        f"occurrence {second} was created; it is queued: pool db full (1 running, limit 1)"
    )
