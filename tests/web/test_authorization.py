"""Who may do what: every identity × every action × both surfaces, against a real server.

Each case arranges a fresh target in the state the action needs (so an allowed
action really succeeds), sends the action as JSON to ``/api/`` or as the console's
confirmed form, and checks the answer: allowed actions succeed under the caller's
name, refused ones get 401 (no or bad credentials) or 403 (role) with the error
body, and leave every job, occurrence and event exactly as they were.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from web.support import CSRF, Web, console_login, hidden_fields, users_cli

from kernel import Kernel

IDENTITIES = ("anonymous", "bad_token", "viewer", "operator", "admin")
# The roles, written out here rather than read from the code under test.
NEEDS = {
    "pause": "operator",
    "resume": "operator",
    "requeue": "operator",
    "adjudicate": "operator",
    "cancel": "operator",
    "run-now": "operator",
    "enable": "admin",
    "disable": "admin",
    "delete": "admin",
    "prune": "admin",
}
_RANK = {"viewer": 1, "operator": 2, "admin": 3}


def _running(web: Web) -> int:
    job = web.fresh_job()
    occ = web.kernel.run_now(
        job, request_id=uuid.uuid4().hex, operator="t", force=True
    ).occurrence.id
    assert web.kernel.claim(occ, owner="w1", lease=600) is not None
    return occ


def _arrange(web: Web, action: str) -> tuple[str, dict[str, Any], str]:
    """A target for ``action`` in the state it needs: (API path, JSON body, what to expect)."""
    kernel = web.kernel
    if action == "pause":
        return f"/occurrences/{_running(web)}/pause", {}, "pause_requested"
    if action == "resume":
        occ = _running(web)
        rid = uuid.uuid4().hex
        kernel.request_pause(
            occ, expected_fence=1, request_id=rid, safe_points=["adapter_checkpoint"], operator="t"
        )
        kernel.ack_pause(
            occ,
            owner="w1",
            fence=1,
            request_id=rid,
            expected_revision=None,
            safe_point="adapter_checkpoint",
            checkpoint={"step": 1},
        )
        return f"/occurrences/{occ}/resume", {}, "resumed"
    if action == "requeue":
        occ = _running(web)
        kernel.fail(occ, owner="w1", fence=1, code="BOOM", message="x", retryable=False)
        return f"/occurrences/{occ}/requeue", {}, "retry_wait"
    if action == "adjudicate":
        job = web.fresh_job(delivery="at-most-once")
        occ = kernel.run_now(
            job, request_id=uuid.uuid4().hex, operator="t", force=True
        ).occurrence.id
        assert kernel.claim(occ, owner="w1", lease=0.01) is not None
        time.sleep(0.05)
        assert kernel.expire_leases()["needs_adjudication"] == 1
        return f"/occurrences/{occ}/adjudicate", {"decision": "applied"}, "succeeded"
    if action == "cancel":
        job = web.fresh_job()
        occ = kernel.run_now(
            job, request_id=uuid.uuid4().hex, operator="t", force=True
        ).occurrence.id
        return f"/occurrences/{occ}/cancel", {}, "cancelled"
    if action == "run-now":
        return f"/jobs/{web.fresh_job()}/run-now", {}, "queued"
    if action in ("enable", "disable", "delete"):
        job = web.fresh_job()
        if action == "enable":
            kernel.set_job_enabled(job, False)
        return f"/jobs/{job}/{action}", {}, action
    assert action == "prune"
    # A cancelled occurrence settled in January: always something for a prune to delete.
    job = web.fresh_job()
    occ = web.past.run_now(job, request_id=uuid.uuid4().hex, operator="t", force=True).occurrence.id
    web.past.cancel(occ, request_id=uuid.uuid4().hex, operator="t")
    return "/prune", {"older_than": "30d"}, "pruned"


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
    return _RANK.get(identity, 0) >= _RANK[NEEDS[action]]


def _check_done(web: Web, action: str, path: str, expect: str, who: str, data: Any) -> None:
    if action in ("enable", "disable"):
        assert data["job"]["enabled"] is (action == "enable")
        assert data["changed"] is True
    elif action == "delete":
        assert data == {"deleted": path.split("/")[2]}
    elif action == "prune":
        assert data["occurrences"] >= 1
    else:
        occ = data["occurrence"]
        assert data["operator"] == who
        state = (occ["control"] or {}).get("state") if action in ("pause", "resume") else None
        assert expect in (occ["status"], state), data
        assert _recorded_as(web.kernel, occ["id"], who)


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


@pytest.mark.parametrize("action", list(NEEDS))
@pytest.mark.parametrize("identity", IDENTITIES)
def test_api(web: Web, identity: str, action: str) -> None:
    path, body, expect = _arrange(web, action)
    token = {"anonymous": None, "bad_token": "0123.not-a-token"}.get(
        identity, web.tokens.get(identity)
    )
    before = _snapshot(web.kernel)
    with web.api(token) as client:
        answer = client.post(f"/api{path}", json=body)
    if _allowed(identity, action):
        assert answer.status_code == 200, answer.text
        _check_done(web, action, path, expect, identity, answer.json())
        return
    status, code = (
        (401, "UNAUTHENTICATED")
        if identity in ("anonymous", "bad_token")
        else (
            403,
            "FORBIDDEN",
        )
    )
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["message"]
    assert _snapshot(web.kernel) == before


@pytest.mark.parametrize("action", list(NEEDS))
@pytest.mark.parametrize("identity", IDENTITIES)
def test_console_form(
    web: Web, sessions: dict[str, httpx.Client], identity: str, action: str
) -> None:
    path, body, expect = _arrange(web, action)
    page = "/kernel/prune" if action == "prune" else path
    client = sessions[identity]
    confirm = client.get(page)
    if not _allowed(identity, action):
        # The refused user gets no form; post one anyway with their real session token.
        expected = 303 if identity in ("anonymous", "bad_token") else 403
        assert confirm.status_code == expected, confirm.text
        overview = client.get("/")
        token = CSRF.search(overview.text)
        form = {"csrf": token.group(1) if token else "", **body}
        before = _snapshot(web.kernel)
        answer = client.post(page, data=form)
        assert answer.status_code == (401 if expected == 303 else 403), answer.text
        assert ("UNAUTHENTICATED" if expected == 303 else "FORBIDDEN") in answer.text
        assert _snapshot(web.kernel) == before
        return
    assert confirm.status_code == 200, confirm.text
    assert f"Confirm {action}" in confirm.text
    fields = hidden_fields(confirm.text)
    answer = client.post(page, data={**fields, **body})
    assert answer.status_code == 200, answer.text
    assert f"{action}: done" in answer.text
    if action not in ("enable", "disable", "delete", "prune"):
        occ_id = int(path.split("/")[2]) if path.startswith("/occurrences") else None
        latest = (
            web.kernel.get_occurrence(occ_id)
            if occ_id
            else web.kernel.list_occurrences(job_id=path.split("/")[2], limit=1)[0]
        )
        assert _recorded_as(web.kernel, latest.id, identity)


def test_a_form_without_its_csrf_token_is_refused(web: Web, sessions: dict[str, Any]) -> None:
    path, _, _ = _arrange(web, "cancel")
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
