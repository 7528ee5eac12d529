"""``jobs run-now --params`` and ``jobs backfill`` on the command line (issue 29)."""

from __future__ import annotations

from kernel import Kernel

from .support import define


def test_run_now_params_reach_the_occurrence_and_bad_json_names_the_field(
    cli, kernel: Kernel
) -> None:
    define(kernel, "tick", overlap="allow")
    ran = cli("jobs", "run-now", "tick", "--params", '{"args": ["b", "c"]}', "--json").json()
    assert kernel.get_occurrence(ran["occurrence"]["id"]).payload["args"] == ["b", "c"]

    for bad, field in (("{not json", "params"), ("[1]", "params"), ('{"args": 3}', "params.args")):
        refused = cli("jobs", "run-now", "tick", "--params", bad, "--json")
        assert refused.code == 1 and refused.json()["error"]["code"] == "INVALID_ARGUMENT"
        assert refused.json()["error"]["details"]["field"] == field
    assert len(kernel.list_occurrences(job_id="tick")) == 1


def test_backfill_twice_creates_nothing_the_second_time(cli, kernel: Kernel) -> None:
    define(kernel, "tick", overlap="allow")
    args = (
        "jobs",
        "backfill",
        "tick",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T00:04:00Z",
    )
    preview = cli(*args, "--dry-run", "--json").json()
    assert [f["trigger_key"] for f in preview["firings"]][:2] == [
        "every:2026-01-01T00:00:00Z",
        "every:2026-01-01T00:01:00Z",
    ]
    assert kernel.list_occurrences(job_id="tick") == []
    first = cli(*args, "--json").json()
    second = cli(*args)
    assert len(first["created"]) == first["planned"] == 5
    assert second.code == 0 and "created" in second.out and "existing" in second.out
    assert len(kernel.list_occurrences(job_id="tick")) == 5

    decades = ("--from", "2000-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z")
    too_many = cli("jobs", "backfill", "tick", *decades, "--json")
    assert too_many.code == 1 and too_many.json()["error"]["details"]["field"] == "max"


def test_params_naming_the_definition_are_refused_for_run_now_and_backfill(
    cli, kernel: Kernel
) -> None:
    define(kernel, "sh", kind="shell", payload={"argv": ["echo", "hi"]}, overlap="allow")
    patch = '{"argv": ["sh", "-c", "id"], "secrets": {"X": "HTTP_AUTH"}}'
    window = ("--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:02:00Z")
    for command in (("run-now", "sh"), ("backfill", "sh", *window)):
        refused = cli("jobs", *command, "--params", patch, "--json")
        assert refused.code == 1, refused.out
        error = refused.json()["error"]
        assert error["code"] == "INVALID_ARGUMENT" and error["details"]["field"] == "params.argv"
        assert "not a run parameter" in error["message"] and "Traceback" not in refused.err
    assert kernel.list_occurrences(job_id="sh") == []
