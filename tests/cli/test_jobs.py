"""``kernel jobs ...`` against a real kernel, in both output modes."""

from __future__ import annotations

import json
from pathlib import Path

from cli.support import define, job, write

from kernel import Kernel

YAML_JOBS = """\
jobs:
  - id: nightly
    kind: shell
    schedule: {cron: "30 2 * * *", timezone: Europe/Berlin}
    payload: {argv: [/bin/true]}
  - id: tick
    kind: callable
    schedule: {every: 30s}
    payload: {callable: "os.path:join", args: [a, b]}
"""

TOML_JOBS = """\
[[jobs]]
id = "nightly"
kind = "shell"
schedule = { cron = "30 2 * * *", timezone = "Europe/Berlin" }
payload = { argv = ["/bin/true"] }

[[jobs]]
id = "tick"
kind = "callable"
schedule = { every = "30s" }
payload = { callable = "os.path:join", args = ["a", "b"] }
"""


def test_apply_creates_then_leaves_unchanged_then_updates(
    cli, kernel: Kernel, tmp_path: Path
) -> None:
    path = write(tmp_path / "jobs.yaml", YAML_JOBS)
    first = cli("jobs", "apply", str(path), "--json")
    assert first.code == 0, first.out
    assert [(j["id"], j["change"], j["revision"]) for j in first.json()["jobs"]] == [
        ("nightly", "created", 1),
        ("tick", "created", 1),
    ]

    again = cli("jobs", "apply", str(path))
    assert again.code == 0
    assert "2 job(s): 0 created, 0 updated, 2 unchanged" in again.out

    write(path, YAML_JOBS.replace("every: 30s", "every: 45s"))
    changed = cli("jobs", "apply", str(path), "--json").json()["jobs"]
    assert changed[1] == {"id": "tick", "change": "updated", "revision": 2}
    assert kernel.get_job("tick").spec["schedule"] == {"every": 45.0}


def test_toml_and_json_files_mean_the_same_as_yaml(cli, kernel: Kernel, tmp_path: Path) -> None:
    assert cli("jobs", "apply", str(write(tmp_path / "a.yaml", YAML_JOBS))).code == 0
    digests = {j.id: j.digest for j in kernel.list_jobs()}
    toml = cli("jobs", "apply", str(write(tmp_path / "b.toml", TOML_JOBS)), "--json").json()
    assert {j["change"] for j in toml["jobs"]} == {"unchanged"}
    as_json = {"jobs": [job.spec for job in kernel.list_jobs()]}
    result = cli("jobs", "apply", str(write(tmp_path / "c.json", json.dumps(as_json))), "--json")
    assert {j["change"] for j in result.json()["jobs"]} == {"unchanged"}
    assert {j.id: j.digest for j in kernel.list_jobs()} == digests


def test_dry_run_reports_without_writing(cli, kernel: Kernel, tmp_path: Path) -> None:
    define(kernel, "tick", schedule={"every": "10s"})
    events_before = len(kernel.events(limit=1000))
    result = cli(
        "jobs", "apply", str(write(tmp_path / "jobs.yaml", YAML_JOBS)), "--dry-run", "--json"
    )
    assert result.code == 0
    assert [(j["id"], j["change"]) for j in result.json()["jobs"]] == [
        ("nightly", "created"),
        ("tick", "updated"),
    ]
    text = cli("jobs", "apply", str(tmp_path / "jobs.yaml"), "--dry-run")
    assert "1 would be created, 1 would be updated" in text.out
    assert [j.id for j in kernel.list_jobs()] == ["tick"]
    assert len(kernel.events(limit=1000)) == events_before


def test_an_invalid_job_names_file_and_field_and_nothing_is_written(
    cli, kernel: Kernel, tmp_path: Path
) -> None:
    bad = YAML_JOBS.replace("Europe/Berlin", "Mars/Olympus").replace("every: 30s", "every: -3s")
    path = write(tmp_path / "jobs.yaml", bad)
    result = cli("jobs", "apply", str(path), "--json")
    assert result.code == 1
    error = result.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert str(path) in error["message"]
    assert [e["field"] for e in error["details"]["errors"]] == [
        "jobs[0].schedule.timezone",
        "jobs[1].schedule.every",
    ]
    text = cli("jobs", "apply", str(path))
    assert text.code == 1
    assert text.out == ""
    assert f"Error INVALID_ARGUMENT: {path}: 2 invalid job(s)" in text.err
    assert (
        "jobs[0] ('nightly'): schedule.timezone: unknown IANA time zone 'Mars/Olympus'" in text.err
    )
    assert kernel.list_jobs() == []
    assert kernel.events(limit=10) == []


def test_duplicate_ids_in_one_file_are_refused(cli, kernel: Kernel, tmp_path: Path) -> None:
    path = write(tmp_path / "jobs.json", json.dumps({"jobs": [job("a"), job("b"), job("a")]}))
    error = cli("jobs", "apply", str(path), "--json").json()["error"]
    assert error["details"]["field"] == "jobs[2].id"
    assert "jobs[0]" in error["message"]
    assert kernel.list_jobs() == []


def test_a_refusal_that_depends_on_the_database_applies_nothing(
    cli, kernel: Kernel, tmp_path: Path
) -> None:
    # Each job alone is valid; together they make a chain cycle, which only the kernel sees.
    jobs = [
        job("a", schedule=None, after={"job": "b"}),
        job("b", schedule=None, after={"job": "a"}),
    ]
    result = cli(
        "jobs", "apply", str(write(tmp_path / "cycle.json", json.dumps({"jobs": jobs}))), "--json"
    )
    assert result.code == 1
    details = result.json()["error"]["details"]
    assert (details["field"], details["applied"]) == ("after.job", [])
    assert kernel.list_jobs() == []


def test_list_and_show(cli, kernel: Kernel) -> None:
    define(kernel, "nightly", schedule={"cron": "0 2 * * *", "timezone": "Europe/Berlin"})
    define(kernel, "manual", schedule=None)
    listed = cli("jobs", "list", "--json").json()
    assert [(j["id"], j["revision"], j["enabled"]) for j in listed] == [
        ("manual", 1, True),
        ("nightly", 1, True),
    ]
    table = cli("jobs", "list").out.splitlines()
    assert table[0].split() == [
        "ID",
        "KIND",
        "ENABLED",
        "REV",
        "SCHEDULE",
        "NEXT",
        "FIRE",
        "(UTC)",
        "QUEUE",
        "LAST",
        "SUCCESS",
        "LAST",
        "FAILURE",
        "FAILS",
    ]
    assert table[1].split()[:5] == ["manual", "callable", "yes", "1", "manual"]
    assert "cron 0 2 * * * Europe/Berlin" in table[2]

    shown = cli("jobs", "show", "nightly", "--json").json()
    assert shown["spec"]["schedule"] == {"cron": "0 2 * * *", "timezone": "Europe/Berlin"}
    text = cli("jobs", "show", "nightly").out
    assert "schedule      cron 0 2 * * * Europe/Berlin" in text
    assert '"timezone": "Europe/Berlin"' in text


def test_an_empty_job_list_says_so(cli, kernel: Kernel) -> None:
    assert cli("jobs", "list", "--json").json() == []
    assert cli("jobs", "list").out.strip() == "(no jobs)"


def test_unknown_job_is_not_found_in_both_modes(cli, kernel: Kernel) -> None:
    for args in (
        ("show", "ghost"),
        ("enable", "ghost"),
        ("delete", "ghost"),
        ("preview", "ghost"),
        ("run-now", "ghost"),
    ):
        result = cli("jobs", *args, "--json")
        assert result.code == 1, args
        assert result.json()["error"]["code"] == "NOT_FOUND"
        text = cli("jobs", *args)
        assert text.code == 1
        assert text.err.startswith("Error NOT_FOUND: job 'ghost' does not exist")


def test_enable_and_disable(cli, kernel: Kernel) -> None:
    define(kernel, "tick")
    off = cli("jobs", "disable", "tick", "--json").json()
    assert (off["changed"], off["job"]["enabled"]) == (True, False)
    assert (
        cli("jobs", "disable", "tick").out.strip() == "job tick disabled (it was already disabled)"
    )
    assert cli("jobs", "enable", "tick").out.strip() == "job tick enabled"
    assert cli("jobs", "enable", "tick", "--json").json()["changed"] is False
    assert kernel.get_job("tick").enabled


def test_delete(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    define(kernel, "b")
    assert cli("jobs", "delete", "a", "--json").json() == {"deleted": "a"}
    assert cli("jobs", "delete", "b").out.strip() == "job b deleted"
    assert kernel.list_jobs() == []


def test_delete_is_refused_while_occurrences_are_unsettled(cli, kernel: Kernel) -> None:
    define(kernel, "busy")
    kernel.run_now("busy", request_id="r", operator="t", force=True)
    result = cli("jobs", "delete", "busy", "--json")
    assert (result.code, result.json()["error"]["code"]) == (1, "STATE_CONFLICT")
    assert kernel.get_job("busy")


def test_run_now_prints_request_id_and_a_retry_is_deduplicated(cli, kernel: Kernel) -> None:
    define(kernel, "tick", enabled=False, overlap="allow")
    text = cli("jobs", "run-now", "tick", "--operator", "alice")
    assert text.code == 0
    generated = text.out.split("request id", 1)[1].split()[0]
    assert len(generated) == 32

    first = cli("jobs", "run-now", "tick", "--request-id", "deploy-42", "--json").json()
    assert (first["request_id"], first["deduplicated"]) == ("deploy-42", False)
    assert first["occurrence"]["trigger_key"] == "manual:deploy-42"
    again = cli("jobs", "run-now", "tick", "--request-id", "deploy-42", "--json").json()
    assert (again["deduplicated"], again["occurrence"]["id"]) == (True, first["occurrence"]["id"])
    assert "deduplicated" in cli("jobs", "run-now", "tick", "--request-id", "deploy-42").out
    assert len(kernel.list_occurrences(job_id="tick")) == 2

    run_now = [e for e in kernel.events(limit=100) if e.type == "job_run_now"]
    assert [e.data["operator"] for e in run_now][0] == "alice"
    assert run_now[1].data["operator"] == first["operator"]


def test_reusing_a_request_id_for_another_job_is_refused(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    define(kernel, "b")
    assert cli("jobs", "run-now", "a", "--request-id", "r1").code == 0
    result = cli("jobs", "run-now", "b", "--request-id", "r1", "--json")
    assert (result.code, result.json()["error"]["code"]) == (1, "EVIDENCE_CONFLICT")
    assert result.json()["error"]["details"]["request_id"] == "r1"
    text = cli("jobs", "run-now", "b", "--request-id", "r1")
    assert "request id: r1" in text.err


def test_a_request_id_with_control_characters_is_refused(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    result = cli("jobs", "run-now", "a", "--request-id", "bad\x1bid", "--json")
    assert result.json()["error"]["details"]["field"] == "request_id"
    assert kernel.list_occurrences() == []


def test_preview_shows_wall_clock_and_utc_across_a_dst_gap(cli, kernel: Kernel) -> None:
    define(kernel, "nightly", schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"})
    data = cli(
        "jobs", "preview", "nightly", "--next", "3", "--after", "2026-03-27T00:00:00Z", "--json"
    ).json()
    assert [(f["utc"], f["local"]) for f in data["firings"]] == [
        ("2026-03-27T01:30:00Z", "2026-03-27T02:30:00+01:00"),
        ("2026-03-28T01:30:00Z", "2026-03-28T02:30:00+01:00"),
        # 02:30 does not exist on 29 March in Berlin: shift_forward fires at 03:00 CEST.
        ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00"),
    ]
    assert data["firings"][2]["trigger_key"] == "cron:2026-03-29T01:00:00Z"
    text = cli(
        "jobs", "preview", "nightly", "--next", "3", "--after", "2026-03-27T00:00:00Z"
    ).out.splitlines()
    assert text[0] == "job nightly: cron 30 2 * * * Europe/Berlin"
    assert text[1] == "zone Europe/Berlin (the job's schedule.timezone)"
    assert data["zone"] == {"name": "Europe/Berlin", "from": "the job's schedule.timezone"}
    assert text[5].split() == [
        "3",
        "2026-03-29T01:00:00Z",
        "2026-03-29T03:00:00+02:00",
        "cron:2026-03-29T01:00:00Z",
    ]


def test_preview_of_a_manual_job_has_no_firings(cli, kernel: Kernel) -> None:
    define(kernel, "manual", schedule=None)
    assert cli("jobs", "preview", "manual", "--json").json()["firings"] == []
    assert "(no upcoming firings)" in cli("jobs", "preview", "manual").out


def test_usage_errors_exit_2_and_keep_the_json_shape(cli, kernel: Kernel) -> None:
    result = cli("jobs", "preview", "x", "--next", "0", "--json")
    assert result.code == 2
    assert result.json()["error"]["code"] == "USAGE"
    assert "--next" in result.json()["error"]["message"]
    plain = cli("jobs", "preview", "x", "--next", "zero")
    assert plain.code == 2
    assert "Invalid value" in plain.err


def test_apply_refuses_a_kind_no_installed_adapter_runs_unless_allowed(
    cli, kernel: Kernel, tmp_path: Path, monkeypatch
) -> None:
    path = write(
        tmp_path / "typo.json",
        json.dumps({"jobs": [{"id": "t", "kind": "shel", "payload": {"argv": ["true"]}}]}),
    )
    refused = cli("jobs", "apply", str(path), "--json")
    assert refused.code == 1
    error = refused.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and "'shel'" in error["message"]
    assert "callable, http, shell, task, watchdog" in error["message"]
    assert kernel.list_jobs() == []
    # A kind installed only on the workers: by flag, or by setting.
    assert cli("jobs", "apply", str(path), "--allow-kind", "shel", "--json").code == 0
    path.write_text(json.dumps({"jobs": [{"id": "u", "kind": "teleport", "payload": {}}]}))
    monkeypatch.setenv("KERNEL_WORKER_KINDS", "gpu, teleport")
    assert cli("jobs", "apply", str(path), "--json").code == 0
    assert [job.id for job in kernel.list_jobs()] == ["t", "u"]


TWO_BAD_JOBS = {
    "jobs": [
        {"id": "first", "kind": "shell", "schedule": {"every": "-5s"},
         "payload": {"argv": "true"}, "overlap": "sometimes", "max_attempts": 0},
        {"id": "second", "kind": "shel", "payload": {"argv": ["true"]}},
    ]
}  # fmt: skip


def test_apply_reports_every_problem_of_every_job_at_once(
    cli, kernel: Kernel, tmp_path: Path
) -> None:
    path = write(tmp_path / "two.json", json.dumps(TWO_BAD_JOBS))
    refused = cli("jobs", "apply", str(path), "--json")
    assert refused.code == 1
    errors = refused.json()["error"]["details"]["errors"]
    fields = {e["field"] for e in errors}
    assert {"jobs[0].schedule.every", "jobs[0].overlap", "jobs[0].max_attempts"} <= fields
    assert "jobs[0].payload.argv" in fields and "jobs[1].kind" in fields, errors
    text = cli("jobs", "apply", str(path)).err
    assert "2 invalid job(s), 5 problem(s)" in text and "jobs[1] ('second'): kind:" in text
    assert kernel.list_jobs() == []


def test_run_now_follows_the_overlap_policy_unless_forced(cli, kernel: Kernel) -> None:
    define(kernel, "tick", overlap="skip")
    first = cli("jobs", "run-now", "tick", "--json").json()["occurrence"]["id"]
    refused = cli("jobs", "run-now", "tick", "--request-id", "r2", "--json")
    assert refused.code == 1
    error = refused.json()["error"]
    assert (error["code"], error["details"]["reason"]) == ("STATE_CONFLICT", "overlap")
    assert error["details"]["active"] == [first] and error["details"]["request_id"] == "r2"
    assert "--force" in cli("jobs", "run-now", "tick", "--request-id", "r2").err
    forced = cli("jobs", "run-now", "tick", "--request-id", "r2", "--force", "--json").json()
    assert forced["occurrence"]["status"] == "queued"


def test_jobs_cancel_cascade(cli, kernel: Kernel) -> None:
    define(kernel, "parent")
    define(kernel, "child", schedule=None, after={"job": "parent"})
    cli("jobs", "run-now", "child", "--request-id", "c1")
    done = cli("jobs", "cancel", "parent", "--cascade", "--request-id", "x1", "--json").json()
    assert (done["jobs"], done["disabled"]) == (["parent", "child"], ["parent", "child"])
    assert len(done["cancelled"]) == 1 and done["deduplicated"] is False
    text = cli("jobs", "cancel", "parent", "--cascade", "--request-id", "x1")
    assert text.code == 0 and "deduplicated" in text.out
    assert not kernel.get_job("child").enabled
    missing = cli("jobs", "cancel", "ghost", "--json")
    assert (missing.code, missing.json()["error"]["code"]) == (1, "NOT_FOUND")
