"""``celery -A APP kernel enqueue TASK ...`` (issue 27): the occurrence as JSON, deduplicated by
key, and refusals with their codes and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner, Result

from kernel import Kernel


def _enqueue(*args: str) -> Result:
    return CliRunner().invoke(
        celery_main, ["-A", "cli.enqueue_app", "kernel", "enqueue", *args], catch_exceptions=True
    )


def test_kernel_enqueue(kernel: Kernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_VAR_DIR", str(tmp_path / "var"))
    first = _enqueue("shop.send_invoice", "--args", "[42]", "--key", "order-42", "--json")
    assert first.exit_code == 0, first.output
    made = json.loads(first.stdout)
    assert made["deduplicated"] is False
    occ = made["occurrence"]
    assert (occ["job_id"], occ["status"], occ["trigger_key"]) == (
        "task:shop.send_invoice", "queued", "key:order-42"
    )  # fmt: skip
    assert kernel.get_occurrence(occ["id"]).payload["args"] == [42]
    again = _enqueue("shop.send_invoice", "--args", "[42]", "--key", "order-42")
    assert again.exit_code == 0 and "deduplicated" in again.stdout, again.output
    why = CliRunner().invoke(
        celery_main, ["-A", "cli.enqueue_app", "kernel", "why", str(occ["id"])]
    )
    assert "enqueued with key 'order-42'" in why.stdout, why.output
    later = json.loads(_enqueue("shop.send_invoice", "--countdown", "60", "--json").stdout)
    assert later["occurrence"]["available_at"] > later["occurrence"]["created_at"]

    refusals = {
        ("shop.send_invoic",): ("NOT_FOUND", "did you mean shop.send_invoice"),
        ("shop.send_invoice", "--args", '{"a": 1}'): ("INVALID_ARGUMENT", "--args"),
        ("shop.send_invoice", "--kwargs", "[1"): ("INVALID_ARGUMENT", "--kwargs"),
        ("shop.send_invoice", "--key", "k" * 201): ("INVALID_ARGUMENT", "key"),
        ("kernel.run_occurrence",): ("INVALID_ARGUMENT", "kernel's own"),
    }
    for args, (code, words) in refusals.items():
        refused = _enqueue(*args, "--json")
        assert refused.exit_code == 1, refused.output
        error = json.loads(refused.stdout)["error"]
        assert error["code"] == code and words in error["message"], error
    assert len(kernel.list_occurrences(limit=10)) == 2


def test_kernel_enqueue_expires_and_why_names_the_deadline_then_the_skip(
    kernel: Kernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_VAR_DIR", str(tmp_path / "var"))
    made = _enqueue("shop.send_invoice", "--expires", "3600", "--json")
    assert made.exit_code == 0, made.output
    occ = json.loads(made.stdout)["occurrence"]
    assert occ["expires_at"] > occ["created_at"]

    def why(occurrence_id: int) -> str:
        said = CliRunner().invoke(
            celery_main, ["-A", "cli.enqueue_app", "kernel", "why", str(occurrence_id)]
        )
        assert said.exit_code == 0, said.output
        return said.stdout

    assert f"expires at {occ['expires_at']} if not started by then" in why(occ["id"])
    stale = json.loads(_enqueue("shop.send_invoice", "--expires", "0", "--json").stdout)
    stale_id = stale["occurrence"]["id"]
    assert "before it started" in why(stale_id)
    assert kernel.skip_expired() == 1  # Beat's upkeep, with no worker on the queue
    said = why(stale_id)
    deadline = stale["occurrence"]["expires_at"]
    assert f"skipped: expired at {deadline} (no worker started it" in said, said
    refused = _enqueue("shop.send_invoice", "--expires", "-1")
    assert refused.exit_code != 0 and "--expires" in refused.output
