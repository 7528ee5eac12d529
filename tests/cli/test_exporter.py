"""``kernel exporter``: scraped over HTTP from a running process."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request

import sqlalchemy as sa
from cli.support import Lines, define, stop
from prometheus_client.parser import text_string_to_metric_families

from celery_app.cli.event_counters import EventCounters
from celery_app.cli.exporter import KernelCollector
from kernel import Decision, Kernel, Verdict


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _busy_kernel(kernel: Kernel) -> None:
    """One success, one dead letter, one pause, one expired lease, one queued; a Beat ticking;
    a job cancelled."""
    define(kernel, "a")
    occ = [
        kernel.run_now("a", request_id=f"r{n}", operator="t", force=True).occurrence.id
        for n in range(5)
    ]
    kernel.claim(occ[0], owner="w", lease=60)
    kernel.succeed(occ[0], owner="w", fence=1)
    kernel.claim(occ[1], owner="w", lease=60)
    kernel.fail(occ[1], owner="w", fence=1, code="X", message="x", retryable=False)
    kernel.claim(occ[2], owner="w", lease=60)
    kernel.request_pause(
        occ[2], expected_fence=1, request_id="p", safe_points=["before_execute"], operator="t"
    )
    kernel.ack_pause(
        occ[2],
        owner="w",
        fence=1,
        request_id="p",
        expected_revision=None,
        safe_point="before_execute",
        checkpoint=None,
    )
    kernel.claim(occ[3], owner="w", lease=0.01)
    time.sleep(0.05)
    assert kernel.claim(occ[3], owner="w2", lease=60) is not None  # a reclaim after expiry
    kernel.record_beat("beat-1", host="h1", interval=5)
    define(kernel, "b", overlap="skip")
    kernel.run_now("b", request_id="rb", operator="t")
    kernel.cancel_job("b", request_id="cb", operator="t")


def test_metrics_over_http_in_both_output_modes(spawn, kernel: Kernel) -> None:
    _busy_kernel(kernel)
    as_json = spawn("exporter", "--port", "0", "--json")
    as_text = spawn("exporter", "--port", "0", "--host", "127.0.0.1")
    started = json.loads(Lines(as_json.stdout).next())
    assert (started["host"], started["url"]) == (
        "127.0.0.1",
        f"http://127.0.0.1:{started['port']}/metrics",
    )
    text_line = Lines(as_text.stdout).next()
    assert text_line.startswith("serving kernel metrics on http://127.0.0.1:")

    m = _scrape(started["url"])
    assert m[("celery_kernel_up", ())] == 1
    assert m[("celery_kernel_occurrences", (("status", "succeeded"),))] == 1
    assert m[("celery_kernel_occurrences", (("status", "dead_letter"),))] == 1
    assert m[("celery_kernel_occurrences", (("status", "queued"),))] == 1
    assert m[("celery_kernel_paused_occurrences", ())] == 1
    assert m[("celery_kernel_claims_total", ())] == 5
    assert m[("celery_kernel_lease_expirations_total", ())] == 1
    assert m[("celery_kernel_pauses_total", ())] == 1
    assert m[("celery_kernel_dead_letters_total", ())] == 1
    assert m[("celery_kernel_job_cancels_total", ())] == 1
    assert m[("celery_kernel_overdue_firings", ())] == 0
    assert m[("celery_kernel_runs_past_timeout", ())] == 0
    assert m[("celery_kernel_stranded_occurrences", ())] == 0  # the queued one is fresh
    assert m[("celery_kernel_oldest_adjudication_age_seconds", ())] == 0
    assert m[("celery_kernel_occurrences", (("status", "cancelled"),))] == 1
    # Four first claims waited from creation; the reclaim after expiry is not a latency.
    assert m[("celery_kernel_claim_latency_seconds_count", ())] == 4
    assert m[("celery_kernel_claim_latency_seconds_bucket", (("le", "+Inf"),))] == 4
    beat = (("beat", "beat-1"), ("host", "h1"))
    assert m[("celery_kernel_beat_interval_seconds", beat)] == 5
    assert 0 <= m[("celery_kernel_beat_lag_seconds", beat)] < 60

    queued = kernel.list_occurrences(statuses=["queued"])[0].id
    kernel.claim(queued, owner="w", lease=60)
    again = _scrape(text_line.split(" on ", 1)[1].strip())
    assert again[("celery_kernel_claims_total", ())] == 6
    assert again[("celery_kernel_claim_latency_seconds_count", ())] == 5
    assert again[("celery_kernel_occurrences", (("status", "queued"),))] == 0
    assert _scrape(started["url"])[("celery_kernel_claims_total", ())] == 6
    # SIGTERM stops it as a service manager would; Ctrl-C as a person would (exit 130).
    for proc, sig, code in ((as_json, signal.SIGTERM, 0), (as_text, signal.SIGINT, 130)):
        assert stop(proc, sig) == code
        assert "Traceback" not in proc.stderr.read()


def test_a_busy_port_is_refused_with_a_code(cli, kernel: Kernel) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = cli("exporter", "--port", port, "--json")
        assert (result.code, result.json()["error"]["code"]) == (1, "INVALID_ARGUMENT")
        assert f"cannot listen on 127.0.0.1:{port}" in cli("exporter", "--port", port).err


def test_verdicts_are_counted_by_authority_and_decision(kernel: Kernel) -> None:
    define(kernel, "once", delivery="at-most-once", max_attempts=1)
    occ = [
        kernel.run_now("once", request_id=f"r{n}", operator="t", force=True).occurrence.id
        for n in range(2)
    ]
    for occ_id in occ:
        kernel.claim(occ_id, owner="w", lease=0.01)
    time.sleep(0.05)
    assert kernel.expire_leases()["needs_adjudication"] == 2
    told, unsure = (kernel.ask_adapter(occ_id, asker="w2", window=30) for occ_id in occ)
    assert told is not None and unsure is not None
    kernel.adapter_adjudicates(occ[0], token=told.token, verdict=Verdict(Decision.APPLIED, {}))
    kernel.adapter_cannot_tell(occ[1], token=unsure.token, reason="no record")
    kernel.adjudicate(occ[1], decision="abandon", request_id="a", operator="t")
    families = list(KernelCollector(kernel, beat_retention_s=600).collect())
    counted = {
        tuple(sorted(s.labels.items())): s.value
        for f in families
        for s in f.samples
        if s.name == "celery_kernel_adjudications_total"
    }
    assert counted == {
        (("authority", "adapter"), ("decision", "applied")): 1,
        (("authority", "adapter"), ("decision", "cannot_tell")): 1,
        (("authority", "operator"), ("decision", "abandon")): 1,
    }


def test_a_transaction_that_commits_after_a_later_id_is_counted_once(
    pg_database_url: str,
) -> None:
    """Issue 39 item 5: on PostgreSQL an occurrence created in a transaction left open
    while a later id commits still has its claim latency observed, and only once."""
    kernel = Kernel.open(pg_database_url, migrate_schema=True)
    caller = sa.create_engine(pg_database_url, poolclass=sa.pool.NullPool)
    counters = EventCounters()
    try:
        for task in ("proj.held", "proj.later"):  # their implicit jobs exist before the race
            kernel.enqueue(task=task)
        with caller.connect() as conn:
            trans = conn.begin()
            held = kernel.enqueue(task="proj.held", connection=conn).occurrence_id
            later = kernel.enqueue(task="proj.later").occurrence_id
            assert held is not None and later is not None and held < later
            assert kernel.claim(later, owner="w", lease=60) is not None
            counters.tail(kernel)
            trans.commit()
        assert kernel.claim(held, owner="w", lease=60) is not None
        counters.tail(kernel)
        counters.tail(kernel)
    finally:
        caller.dispose()
        kernel.close()
    samples = {s.name: s.value for m in counters.metrics() for s in m.samples}
    assert samples["celery_kernel_claims_total"] == 2
    assert samples["celery_kernel_claim_latency_seconds_count"] == 2
