"""Job definitions through the API and the console: apply (create, revise by expected
revision), and the same JSON and refusals as ``kernel jobs apply|disable|delete --json``."""

from __future__ import annotations

import getpass
import html
import json
from pathlib import Path
from typing import Any

from celery.bin.celery import celery as celery_main
from click.testing import CliRunner
from web.support import Web, console_login, hidden_fields

_PAYLOAD = {"callable": "os.path:join", "args": ["a"]}


def _spec(**fields: Any) -> dict[str, Any]:
    return {"kind": "callable", "payload": _PAYLOAD, "schedule": {"every": "1h"}, **fields}


def _cli(web: Web, tmp: Path, *args: str) -> tuple[int, Any]:
    """``kernel ARGS --json`` over the web server's database, the real CLI in-process."""
    url = web.kernel.engine.url.render_as_string(hide_password=False)
    runner = CliRunner(env={"KERNEL_DATABASE_URL": url, "KERNEL_VAR_DIR": str(tmp)})
    done = runner.invoke(celery_main, ["-A", "celery_app", "kernel", *args, "--json"])
    return done.exit_code, json.loads(done.stdout)


def test_the_api_creates_and_revises_by_expected_revision(web: Web) -> None:
    with web.api(web.tokens["admin"]) as api:

        def apply(job: str, **body: Any) -> Any:
            return api.post(f"/api/jobs/{job}/apply", json=body)

        made = apply("def-a", spec=_spec())
        assert made.status_code == 200, made.text
        assert made.json() == {
            "dry_run": False,
            "jobs": [{"id": "def-a", "change": "created", "revision": 1}],
        }
        again = apply("def-a", spec=_spec())
        assert again.json()["jobs"] == [{"id": "def-a", "change": "unchanged", "revision": 1}]
        checked = apply("def-a", spec=_spec(schedule={"every": "2h"}), dry_run=True)
        assert checked.json()["jobs"] == [{"id": "def-a", "change": "updated", "revision": None}]
        assert web.kernel.get_job("def-a").revision == 1
        revised = apply("def-a", spec=_spec(schedule={"every": "2h"}), expected_revision=1)
        assert revised.json()["jobs"] == [{"id": "def-a", "change": "updated", "revision": 2}]
        assert api.get("/api/jobs/def-a").json()["spec"]["schedule"] == {"every": 7200.0}

        before = web.kernel.last_event_id()
        for body in (
            {"spec": _spec(schedule={"every": "3h"}), "expected_revision": 1},
            {"spec": _spec(schedule={"every": "3h"}), "expected_revision": 1, "dry_run": True},
        ):
            stale = apply("def-a", **body)
            assert stale.status_code == 409, stale.text
            error = stale.json()["error"]
            assert error["code"] == "REVISION_CONFLICT"
            assert "revision 2, not 1" in error["message"]
        assert web.kernel.get_job("def-a").revision == 2
        assert web.kernel.last_event_id() == before

        missing = apply("def-none", spec=_spec(), expected_revision=1)
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "NOT_FOUND")
        for job, spec, field in (
            ("def-b", _spec(id="other"), "spec.id"),
            ("def-b", _spec(kind="shel"), "kind"),
            ("def-b", _spec(schedule={"every": "soon"}), "schedule.every"),
            ("def-b", _spec(kind="shell", payload={"argv": ["x"], "env": {"K": "***"}}), "env.K"),
        ):
            refused = apply(job, spec=spec)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "INVALID_ARGUMENT"
            assert field in refused.json()["error"]["message"]
        assert [j.id for j in web.kernel.list_jobs()].count("def-b") == 0
        assert web.kernel.last_event_id() == before


def test_the_api_answers_what_the_cli_prints(web: Web, tmp_path: Path) -> None:
    file = tmp_path / "jobs.json"
    file.write_text(json.dumps({"jobs": [{"id": "def-cli", **_spec()}]}))
    code, printed = _cli(web, tmp_path, "jobs", "apply", str(file))
    assert code == 0
    # The CLI records the OS user as who changed the job; the API its user.
    assert web.kernel.events(job_id="def-cli")[-1].data["operator"] == getpass.getuser()
    with web.api(web.tokens["admin"]) as api:
        answered = api.post("/api/jobs/def-api/apply", json={"spec": _spec()}).json()
        assert web.kernel.events(job_id="def-api")[-1].data["operator"] == "admin"
        # The CLI adds what a job file has beside its jobs: its path and its pools.
        assert {**answered, "file": str(file), "pools": {}} == {
            **printed,
            "jobs": [{**printed["jobs"][0], "id": "def-api"}],
        }
        # A stale expected revision: the same code from both.
        file.write_text(json.dumps({"jobs": [{"id": "def-cli", **_spec(queue="q2")}]}))
        code, printed = _cli(web, tmp_path, "jobs", "apply", str(file), "--expected-revision", "7")
        stale = api.post(
            "/api/jobs/def-api/apply", json={"spec": _spec(queue="q2"), "expected_revision": 7}
        )
        assert code == 1 and printed["error"]["code"] == stale.json()["error"]["code"]
        assert "revision 1, not 7" in printed["error"]["message"]
        code, printed = _cli(web, tmp_path, "jobs", "apply", str(file), "--expected-revision", "1")
        assert (code, printed["jobs"][0]["revision"]) == (0, 2)
        for verb in ("disable", "enable", "delete"):
            code, printed = _cli(web, tmp_path, "jobs", verb, "def-cli")
            answered = api.post(f"/api/jobs/def-api/{verb}").json()
            assert code == 0
            if verb == "delete":
                assert (printed, answered) == ({"deleted": "def-cli"}, {"deleted": "def-api"})
            else:
                assert printed["changed"] is answered["changed"] is True
                assert printed["job"].keys() == answered["job"].keys()
                assert printed["job"]["enabled"] is answered["job"]["enabled"]


def test_the_console_edits_a_definition_after_a_check(web: Web) -> None:
    job = web.fresh_job()
    admin = console_login(web.url, "admin", web.tokens["admin"])
    page = admin.get(f"/jobs/{job}")
    assert page.status_code == 200
    assert f"/jobs/{job}/apply" in page.text and "callable: os.path:join" in page.text
    edit = admin.get(f"/jobs/{job}/apply")
    assert "Check the definition" in edit.text
    fields = hidden_fields(edit.text)
    assert (fields["expected_revision"], fields["dry_run"]) == ("1", "true")
    new = json.dumps(_spec(id=job, schedule={"every": "3h"}))
    check = admin.post(f"/jobs/{job}/apply", data={**fields, "spec": new})
    assert check.status_code == 200, check.text
    assert "would be <strong>updated</strong>" in check.text
    assert web.kernel.get_job(job).revision == 1
    confirm = hidden_fields(check.text)
    assert "dry_run" not in confirm and json.loads(confirm["spec"])["schedule"] == {"every": "3h"}
    done = admin.post(f"/jobs/{job}/apply", data=confirm)
    assert done.status_code == 200 and "apply: done" in done.text, done.text
    assert web.kernel.get_job(job).spec["schedule"] == {"every": 10800.0}
    # The same confirmed form again: the job moved on, so it is refused, not re-applied.
    stale = admin.post(f"/jobs/{job}/apply", data=confirm)
    assert stale.status_code == 409 and "REVISION_CONFLICT" in stale.text
    broken = admin.post(f"/jobs/{job}/apply", data={**fields, "spec": "{not json"})
    assert broken.status_code == 422 and "not JSON" in html.unescape(broken.text)
    admin.close()


def test_the_console_defines_a_new_job(web: Web) -> None:
    admin = console_login(web.url, "admin", web.tokens["admin"])
    assert 'action="/define"' in admin.get("/jobs").text
    form = admin.get("/define", params={"id": "def-new"}, follow_redirects=True)
    assert str(form.url).endswith("/jobs/def-new/apply") and "Check the definition" in form.text
    fields = hidden_fields(form.text)
    assert "expected_revision" not in fields
    check = admin.post("/jobs/def-new/apply", data={**fields, "spec": json.dumps(_spec())})
    assert "would be <strong>created</strong>" in check.text
    done = admin.post("/jobs/def-new/apply", data=hidden_fields(check.text))
    assert "apply: done" in done.text
    assert web.kernel.get_job("def-new").revision == 1
    operator = console_login(web.url, "operator", web.tokens["operator"])
    assert 'action="/define"' not in operator.get("/jobs").text
    admin.close()
    operator.close()


def test_a_viewer_sees_the_definition_but_no_forms(web: Web) -> None:
    job = web.fresh_job()
    viewer = console_login(web.url, "viewer", web.tokens["viewer"])
    page = viewer.get(f"/jobs/{job}")
    assert page.status_code == 200 and "os.path:join" in page.text
    assert f'href="/jobs/{job}/' not in page.text and "<form" not in page.text.split("</header>")[1]
    assert viewer.get(f"/jobs/{job}/apply").status_code == 403
    viewer.close()
