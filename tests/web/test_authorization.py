"""Who may do what: every identity × every action × both surfaces, against a real server.

Each case arranges a fresh target in the state the action needs (so an allowed
action really succeeds), sends the action as JSON to ``/api/`` or as the console's
confirmed form, and checks the answer: allowed actions succeed under the caller's
name, refused ones get 401 (no or bad credentials) or 403 (role) with the error
body, and leave every job, occurrence and event exactly as they were.
"""

from __future__ import annotations

import html
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from web.support import CSRF, Web, console_login, hidden_fields, users_cli

from celery_app.web.actions import ACTIONS
from kernel import Kernel

IDENTITIES = ("anonymous", "bad_token", "viewer", "operator", "admin")
_RANK = {"viewer": 1, "operator": 2, "admin": 3}


@dataclass(frozen=True)
class Target:
    """Where an action goes and with what: the API path under ``/api`` (also the console
    page, unless ``page`` says otherwise), its JSON body and the console form's fields
    beside the confirmation page's hidden ones (default: the body)."""

    path: str
    body: dict[str, Any] = field(default_factory=dict)
    form: dict[str, str] | None = None
    page: str | None = None


Check = Callable[[Web, Target, str, Any], None]


@dataclass(frozen=True)
class Case:
    """One row of the matrix: the role the issue gives the action (written out here,
    not read from the code under test), a target in the state the action needs (so an
    allowed action really succeeds), and what success looks like."""

    needs: str
    arrange: Callable[[Web], Target]
    check: Check


def _running(web: Web) -> int:
    job = web.fresh_job()
    occ = web.kernel.run_now(
        job, request_id=uuid.uuid4().hex, operator="t", force=True
    ).occurrence.id
    assert web.kernel.claim(occ, owner="w1", lease=600) is not None
    return occ


def _queued(web: Web, **fields: Any) -> int:
    job = web.fresh_job(**fields)
    return web.kernel.run_now(job, request_id=uuid.uuid4().hex, operator="t").occurrence.id


def _pausable(web: Web) -> Target:
    return Target(f"/occurrences/{_running(web)}/pause")


def _cancellable(web: Web) -> Target:
    return Target(f"/occurrences/{_queued(web)}/cancel")


def _paused(web: Web) -> Target:
    occ = _running(web)
    rid = uuid.uuid4().hex
    web.kernel.request_pause(
        occ, expected_fence=1, request_id=rid, safe_points=["adapter_checkpoint"], operator="t"
    )
    web.kernel.ack_pause(
        occ,
        owner="w1",
        fence=1,
        request_id=rid,
        expected_revision=None,
        safe_point="adapter_checkpoint",
        checkpoint={"step": 1},
    )
    return Target(f"/occurrences/{occ}/resume")


def _dead_letter(web: Web) -> Target:
    occ = _running(web)
    web.kernel.fail(occ, owner="w1", fence=1, code="BOOM", message="x", retryable=False)
    return Target(f"/occurrences/{occ}/requeue")


def _unknown_outcome(web: Web) -> Target:
    occ = _queued(web, delivery="at-most-once")
    assert web.kernel.claim(occ, owner="w1", lease=0.01) is not None
    time.sleep(0.05)
    assert web.kernel.expire_leases()["needs_adjudication"] == 1
    return Target(f"/occurrences/{occ}/adjudicate", {"decision": "applied"})


def _awaiting(action: str) -> Callable[[Web], Target]:
    def arrange(web: Web) -> Target:
        job = web.fresh_job(approval={"required": True})
        report = web.kernel.fire(
            job,
            expected_revision=1,
            expected_cursor=None,
            firings=[(f"t-{uuid.uuid4().hex}", web.kernel.now())],
            next_cursor=None,
        )
        (occ,) = report.created
        return Target(f"/occurrences/{occ}/{action}")

    return arrange


def _job(action: str, *, enabled: bool = True) -> Callable[[Web], Target]:
    def arrange(web: Web) -> Target:
        job = web.fresh_job(enabled=enabled)
        return Target(f"/jobs/{job}/{action}")

    return arrange


def _backfill_range(web: Web) -> Target:
    job = web.fresh_job(overlap="allow")
    start, end = "2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z"
    form = {"start": start, "end": end}  # the console's field names
    return Target(f"/jobs/{job}/backfill", {"from": start, "to": end}, form)


def _backfilled(web: Web, target: Target, who: str, data: Any) -> None:
    assert len(data["created"]) == 3
    made = web.kernel.list_occurrences(job_id=data["job_id"])
    assert sorted(o.trigger_key for o in made)[0] == "every:2026-01-01T00:00:00Z"


def _revision(web: Web) -> Target:
    job = web.fresh_job()
    spec = {"kind": "callable", "payload": {"callable": "os.path:join"}, "schedule": None}
    return Target(
        f"/jobs/{job}/apply",
        {"spec": spec, "expected_revision": 1},
        form={"spec": json.dumps(spec), "dry_run": ""},  # skip the check step: confirm
    )


def _old_history(web: Web) -> Target:
    # A cancelled occurrence settled in January: always something for a prune to delete.
    job = web.fresh_job()
    occ = web.past.run_now(job, request_id=uuid.uuid4().hex, operator="t", force=True).occurrence.id
    web.past.cancel(occ, request_id=uuid.uuid4().hex, operator="t")
    return Target("/prune", {"older_than": "30d"}, page="/kernel/prune")


def _pool(web: Web) -> Target:
    name = f"p{uuid.uuid4().hex[:8]}"
    return Target("/set-pool", {"name": name, "limit": 3}, page="/kernel/set-pool")


def _pool_set(web: Web, target: Target, who: str, data: Any) -> None:
    assert data["pool"] == {**data["pool"], "name": target.body["name"], "limit": 3}
    assert {p.name: p.limit for p in web.kernel.pools()}[target.body["name"]] == 3


def _occurrence_now(expect: str) -> Check:
    """The action's occurrence reached ``expect`` (status or control state), recorded
    under the caller's name."""

    def check(web: Web, target: Target, who: str, data: Any) -> None:
        occ = data["occurrence"]
        assert data["operator"] == who
        assert expect in (occ["status"], (occ["control"] or {}).get("state")), data
        assert _recorded_as(web.kernel, occ["id"], who)

    return check


def _enabled_now(enabled: bool) -> Check:
    def check(web: Web, target: Target, who: str, data: Any) -> None:
        assert data["changed"] is True and data["job"]["enabled"] is enabled
        assert web.kernel.get_job(data["job"]["id"]).enabled is enabled
        assert _last_change_by(web.kernel, data["job"]["id"]) == who

    return check


def _deleted(web: Web, target: Target, who: str, data: Any) -> None:
    job = target.path.split("/")[2]
    assert data == {"deleted": job}
    assert job not in {j.id for j in web.kernel.list_jobs()}
    assert _last_change_by(web.kernel, job) == who


def _revised(web: Web, target: Target, who: str, data: Any) -> None:
    job = target.path.split("/")[2]
    assert data["jobs"] == [{"id": job, "change": "updated", "revision": 2}]
    assert web.kernel.get_job(job).spec["schedule"] is None
    assert _last_change_by(web.kernel, job) == who


def _last_change_by(kernel: Kernel, job_id: str) -> Any:
    """Who the job's latest event says made the change."""
    return kernel.events(job_id=job_id, limit=100)[-1].data.get("operator")


def _pruned(web: Web, target: Target, who: str, data: Any) -> None:
    assert data["occurrences"] >= 1


# Adding an action to the API and console is one row here.
CASES = {
    "pause": Case(
        "operator",
        lambda web: Target(f"/occurrences/{_running(web)}/pause"),
        _occurrence_now("pause_requested"),
    ),
    "resume": Case("operator", _paused, _occurrence_now("resumed")),
    "requeue": Case("operator", _dead_letter, _occurrence_now("retry_wait")),
    "adjudicate": Case("operator", _unknown_outcome, _occurrence_now("succeeded")),
    "cancel": Case(
        "operator",
        lambda web: Target(f"/occurrences/{_queued(web)}/cancel"),
        _occurrence_now("cancelled"),
    ),
    "approve": Case("operator", _awaiting("approve"), _occurrence_now("queued")),
    "reject": Case("operator", _awaiting("reject"), _occurrence_now("skipped")),
    "run-now": Case("operator", _job("run-now"), _occurrence_now("queued")),
    "backfill": Case("operator", _backfill_range, _backfilled),
    "apply": Case("admin", _revision, _revised),
    "enable": Case("operator", _job("enable", enabled=False), _enabled_now(True)),
    "disable": Case("operator", _job("disable"), _enabled_now(False)),
    "delete": Case("admin", _job("delete"), _deleted),
    "prune": Case("admin", _old_history, _pruned),
    "set-pool": Case("admin", _pool, _pool_set),
}


def test_every_action_is_in_the_matrix() -> None:
    assert sorted(CASES) == sorted(ACTIONS)


def _snapshot(kernel: Kernel) -> Any:
    """Everything an action could change."""
    occurrences = kernel.list_occurrences(limit=1000)
    assert len(occurrences) < 1000
    return (
        [job.to_dict() for job in kernel.list_jobs()],
        [
            {**o.to_dict(), "checkpoint": o.checkpoint, "result": o.result}
            for o in sorted(occurrences, key=lambda o: o.id)
        ],
        kernel.last_event_id(),
    )


def _allowed(identity: str, action: str) -> bool:
    return _RANK.get(identity, 0) >= _RANK[CASES[action].needs]


def _recorded_as(kernel: Kernel, occurrence_id: int, who: str) -> bool:
    """Whether an event of the occurrence names ``who`` as the operator who acted."""
    events = kernel.events(occurrence_id=occurrence_id, limit=100)
    named = {e.data.get("operator") for e in events} | {e.data.get("reason") for e in events}
    return who in named or f"operator:{who}" in named


def _session(web: Web, identity: str) -> httpx.Client:
    if identity in ("anonymous", "bad_token"):
        client = httpx.Client(base_url=web.url, timeout=30)
        if identity == "bad_token":
            client.cookies.set("kernel_session", "forged-" + uuid.uuid4().hex)
        return client
    return console_login(web.url, identity, web.tokens[identity])


@pytest.fixture(scope="module")
def sessions(web: Web) -> Iterator[dict[str, httpx.Client]]:
    made = {identity: _session(web, identity) for identity in IDENTITIES}
    yield made
    for client in made.values():
        client.close()


@pytest.mark.parametrize("action", list(CASES))
@pytest.mark.parametrize("identity", IDENTITIES)
def test_api(web: Web, identity: str, action: str) -> None:
    target = CASES[action].arrange(web)
    token = {"anonymous": None, "bad_token": "0123.not-a-token"}.get(
        identity, web.tokens.get(identity)
    )
    before = _snapshot(web.kernel)
    with web.api(token) as client:
        answer = client.post(f"/api{target.path}", json=target.body)
    if _allowed(identity, action):
        assert answer.status_code == 200, answer.text
        CASES[action].check(web, target, identity, answer.json())
        return
    anonymous = identity in ("anonymous", "bad_token")
    status, code = (401, "UNAUTHENTICATED") if anonymous else (403, "FORBIDDEN")
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["message"]
    assert _snapshot(web.kernel) == before


@pytest.mark.parametrize("action", list(CASES))
@pytest.mark.parametrize("identity", IDENTITIES)
def test_console_form(
    web: Web, sessions: dict[str, httpx.Client], identity: str, action: str
) -> None:
    target = CASES[action].arrange(web)
    page = target.page or target.path
    form = target.form if target.form is not None else target.body
    client = sessions[identity]
    confirm = client.get(page)
    if not _allowed(identity, action):
        # The refused user gets no form; post one anyway with their real session token.
        expected = 303 if identity in ("anonymous", "bad_token") else 403
        assert confirm.status_code == expected, confirm.text
        overview = client.get("/")
        token = CSRF.search(overview.text)
        before = _snapshot(web.kernel)
        answer = client.post(page, data={"csrf": token.group(1) if token else "", **form})
        assert answer.status_code == (401 if expected == 303 else 403), answer.text
        assert ("UNAUTHENTICATED" if expected == 303 else "FORBIDDEN") in answer.text
        assert _snapshot(web.kernel) == before
        return
    assert confirm.status_code == 200, confirm.text
    assert f"Confirm: {action}" in confirm.text
    answer = client.post(page, data={**hidden_fields(confirm.text), **form})
    assert answer.status_code == 200, answer.text
    assert f"{action}: done" in answer.text
    CASES[action].check(web, target, identity, _shown_result(answer.text))


def _shown_result(page: str) -> Any:
    """The action's JSON answer, as the result page shows it."""
    found = re.search(r'<pre id="result">(.*?)</pre>', page, re.S)
    assert found, page
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.parametrize("action", list(CASES))
def test_the_console_offers_each_action_where_it_applies(
    web: Web, sessions: dict[str, httpx.Client], action: str
) -> None:
    """The page of the arranged target (the overview for kernel-wide actions) has the
    action's button for an admin."""
    target = CASES[action].arrange(web)
    page = target.page or target.path
    shown_on = page.rsplit("/", 1)[0] if page.startswith(("/occurrences/", "/jobs/")) else "/"
    assert f'href="{page}"' in sessions["admin"].get(shown_on).text


def test_a_form_without_its_csrf_token_is_refused(web: Web, sessions: dict[str, Any]) -> None:
    path = CASES["cancel"].arrange(web).path
    before = _snapshot(web.kernel)
    for form in ({}, {"csrf": "guessed"}):
        answer = sessions["admin"].post(path, data=form)
        assert answer.status_code == 403 and "CSRF" in answer.text
    cross = sessions["admin"].post(
        path,
        data={"csrf": CSRF.search(sessions["admin"].get("/").text).group(1)},  # type: ignore[union-attr]
        headers={"Origin": "http://evil.example"},
    )
    assert cross.status_code == 403 and "another origin" in cross.text
    assert _snapshot(web.kernel) == before


def test_a_removed_user_is_refused_at_once(web: Web) -> None:
    made = users_cli(web.users_file, "add", "temp", "--role", "admin")
    session = console_login(web.url, "temp", made["token"])
    with web.api(made["token"]) as client:
        assert client.get("/api/whoami").json() == {"user": "temp", "role": "admin"}
        assert users_cli(web.users_file, "remove", "temp") == {"removed": "temp"}
        assert client.get("/api/whoami").status_code == 401
    assert session.get("/").status_code == 303  # back to the login form
    session.close()
    listed = users_cli(web.users_file, "list")
    assert listed == [{"user": r, "role": r} for r in ("admin", "operator", "viewer")]
