"""Hostile input against a real ``kernel web``: refused cheaply, in the error shape, never a 500.

Each case was a reproduction against the server before its fix (issue 24): a non-ASCII
token was a 500, an anonymous 100 MiB POST was read whole before its 401, an empty
occurrence page and an out-of-range date were 500s, and failed sign-ins were unlimited.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner
from web.support import CSRF, Web, console_login, serve

from celery_app.setting_values import ConfigInvalid
from celery_app.web.users import Role, UserStore
from celery_app.web_settings import WebSettings

_MIB = 1024 * 1024
_NONCE = re.compile(r'name="nonce" value="([^"]+)"')


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _error(answer: httpx.Response, status: int, code: str) -> dict[str, str]:
    assert answer.status_code == status, answer.text
    error: dict[str, str] = answer.json()["error"]
    assert error["code"] == code and error["message"], error
    return error


def _login_form(client: httpx.Client) -> str:
    """The login form's nonce; its cookie is carried over plain HTTP even when Secure."""
    form = client.get("/login")
    nonce = _NONCE.search(form.text)
    assert nonce
    client.cookies.set("kernel_login", nonce.group(1))
    return nonce.group(1)


def _from(web: Web, address: str, token: str | None = None) -> httpx.Client:
    """A client connecting from another loopback address (the limits count per address)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=web.url, headers=headers, transport=transport, timeout=30)


@pytest.mark.parametrize(
    "header",
    [b"Bearer \xc3\xa9.\xc3\xa9", b"Bearer \xe9abc.def", b"Bearer 0123.s\xe9cret", b"Bearer ..."],
)
def test_a_non_ascii_or_malformed_bearer_token_is_401(web: Web, header: bytes) -> None:
    with httpx.Client(base_url=web.url, timeout=30) as client:
        answer = client.get("/api/whoami", headers={"Authorization": header})
    _error(answer, 401, "UNAUTHENTICATED")


@pytest.mark.parametrize(
    ("name", "token"), [("ädmin", "x.y"), ("admin", "clé.secrète"), ("admin", "ü" * 200)]
)
def test_a_non_ascii_login_is_401(web: Web, name: str, token: str) -> None:
    with httpx.Client(base_url=web.url, timeout=30) as client:
        nonce = _login_form(client)
        answer = client.post(
            "/login", data={"name": name, "token": token, "nonce": nonce, "then": "/"}
        )
    assert answer.status_code == 401, answer.text
    assert "wrong user name or token" in answer.text


def test_a_non_ascii_nonce_or_csrf_token_is_refused_not_a_500(web: Web) -> None:
    with httpx.Client(base_url=web.url, timeout=30) as client:
        _login_form(client)
        answer = client.post(
            "/login", data={"name": "admin", "token": web.tokens["admin"], "nonce": "é"}
        )
    assert answer.status_code == 403, answer.text
    with closing(console_login(web.url, "admin", web.tokens["admin"])) as client:
        assert CSRF.search(client.get("/").text)
        answer = client.post("/logout", data={"csrf": "é"}, headers={"Origin": web.url})
    assert answer.status_code == 403, answer.text


def _stream(mib: int) -> Iterator[bytes]:
    block = b"x" * _MIB
    for _ in range(mib):
        yield block


@pytest.mark.parametrize("identity", ["anonymous", "admin"])
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_large_post_is_refused_before_its_body_is_read(
    web: Web, identity: str, declared: bool
) -> None:
    """100 MiB at the API: 401 (anonymous) or 413 (too large), the server's memory flat."""
    token = web.tokens.get(identity)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers["Content-Type"] = "application/json"
    if declared:
        headers["Content-Length"] = str(100 * _MIB)
    before = _rss_mib(web.proc.pid)
    with httpx.Client(base_url=web.url, timeout=60) as client:
        answer = client.post("/api/jobs/big/apply", content=_stream(100), headers=headers)
    grown = _rss_mib(web.proc.pid) - before
    if identity == "anonymous":
        _error(answer, 401, "UNAUTHENTICATED")
    else:
        assert "1048576 bytes" in _error(answer, 413, "PAYLOAD_TOO_LARGE")["message"]
    assert grown < 20, f"the server grew by {grown:.0f} MiB"


def test_a_large_login_form_is_413_before_it_is_read(web: Web) -> None:
    before = _rss_mib(web.proc.pid)
    with httpx.Client(base_url=web.url, timeout=60) as client:
        answer = client.post(
            "/login",
            content=_stream(50),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    assert answer.status_code == 413, answer.text
    assert "PAYLOAD_TOO_LARGE" in answer.text
    assert _rss_mib(web.proc.pid) - before < 20


@pytest.mark.parametrize("query", ["job=no-such-job", "before=1", "status=paused&job=x"])
def test_an_empty_occurrence_page_is_shown(web: Web, query: str) -> None:
    with closing(console_login(web.url, "viewer", web.tokens["viewer"])) as client:
        answer = client.get(f"/occurrences?{query}")
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59", "0001-01-01T00:00:00"])
def test_a_date_at_the_calendars_ends_is_answered_within_the_schedules_years(
    web: Web, at: str
) -> None:
    """Schedules fire from 1970 to 9000 (issue 41): a preview from either end of the
    calendar answers within those years, never a 500; ``why`` at 9999 answers too, and at
    year 1 (where no firing's neighbour exists) is one INVALID_ARGUMENT."""
    job = web.fresh_job()
    with web.api(web.tokens["viewer"]) as client:
        why = client.get(f"/api/jobs/{job}/why", params={"at": at})
        if at.startswith("0001"):
            _error(why, 422, "INVALID_ARGUMENT")
        else:
            assert why.status_code == 200, why.text
        answer = client.get(f"/api/jobs/{job}/preview", params={"after": at})
    assert answer.status_code == 200, answer.text
    assert all(f["utc"] <= "9000-01-01T00:00:00Z" for f in answer.json()["firings"])


def test_a_date_past_the_calendar_is_invalid_argument(web: Web) -> None:
    job = web.fresh_job()
    at = "0001-01-01T00:00:00+14:00"
    with web.api(web.tokens["viewer"]) as client:
        _error(client.get(f"/api/jobs/{job}/why", params={"at": at}), 422, "INVALID_ARGUMENT")
        answer = client.get(f"/api/jobs/{job}/preview", params={"after": at})
    _error(answer, 422, "INVALID_ARGUMENT")


def test_firings_stop_at_the_schedules_last_year(web: Web) -> None:
    job = web.fresh_job(schedule={"every": "3650d"})
    with web.api(web.tokens["viewer"]) as client:
        answer = client.get(f"/api/jobs/{job}/preview", params={"next": 1000})
    assert answer.status_code == 200, answer.text
    firings = answer.json()["firings"]
    assert 0 < len(firings) < 1000 and firings[-1]["utc"] < "9000-01-01T00:00:01Z"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"spec": {"kind": "callable", "timeout": 1e400}}', 422),
        (b'{"spec": {"kind": "callable", "payload": {"args": [' + b"9" * 5000 + b"]}}}", 400),
        (b'{"spec": {"payload": {"args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}}", 400),
        (b'{"spec": {"payload": {"args": ' + b"[" * 900 + b"]" * 900 + b"}}}", 422),
    ],
    ids=["past-float-range", "huge-integer", "deep-nesting", "nested-900"],
)
def test_extreme_json_is_refused_in_the_error_shape(web: Web, body: bytes, status: int) -> None:
    with web.api(web.tokens["admin"]) as client:
        answer = client.post(
            "/api/jobs/extreme/apply", content=body, headers={"Content-Type": "application/json"}
        )
    _error(answer, status, "INVALID_ARGUMENT")


def test_query_numbers_past_float_range_are_invalid_argument(web: Web) -> None:
    with web.api(web.tokens["viewer"]) as client:
        for query in ("limit=1e400", "before=1e999", "limit=" + "9" * 5000):
            _error(client.get(f"/api/occurrences?{query}"), 422, "INVALID_ARGUMENT")


# -- a server with small limits and Secure cookies ---------------------------------


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    with serve(
        tmp_path_factory.mktemp("guarded"),
        KERNEL_WEB_SIGN_IN_LIMIT="3",
        KERNEL_WEB_SECURE_COOKIES="true",
        KERNEL_WEB_MAX_BODY="4096",
    ) as served:
        yield served


def test_failed_bearer_tokens_are_limited_per_address(guarded: Web) -> None:
    with _from(guarded, "127.0.0.2", "0123.not-a-token") as bad:
        for _ in range(3):
            _error(bad.get("/api/whoami"), 401, "UNAUTHENTICATED")
        refused = bad.get("/api/whoami")
        _error(refused, 429, "TOO_MANY_SIGN_INS")
        assert 0 < int(refused.headers["Retry-After"]) <= 60
    # A token never verified would cost an scrypt: the address waits for it too.
    _, unseen = UserStore(guarded.users_file).add("unseen", Role.VIEWER)
    with _from(guarded, "127.0.0.2", unseen) as same_address:
        _error(same_address.get("/api/whoami"), 429, "TOO_MANY_SIGN_INS")
    with _from(guarded, "127.0.0.3", unseen) as elsewhere:
        assert elsewhere.get("/api/whoami").status_code == 200


def test_forwarded_for_is_believed_only_from_a_configured_proxy(tmp_path: Path) -> None:
    """A rotating X-Forwarded-For from an unlisted address (loopback included) changes
    nothing: its failures count against the address that connected."""

    def statuses(web: Web, address: str) -> list[int]:
        with _from(web, address, "0123.not-a-token") as client:
            return [
                client.get("/api/whoami", headers={"X-Forwarded-For": f"10.9.0.{n}"}).status_code
                for n in range(5)
            ]

    limits = {"KERNEL_WEB_SIGN_IN_LIMIT": "3"}
    with serve(tmp_path / "direct", **limits) as direct:
        assert statuses(direct, "127.0.0.1") == [401, 401, 401, 429, 429]
    with serve(tmp_path / "proxied", **limits, KERNEL_WEB_TRUSTED_PROXIES="127.0.0.13") as proxied:
        assert statuses(proxied, "127.0.0.1") == [401, 401, 401, 429, 429]
        assert statuses(proxied, "127.0.0.13") == [401] * 5  # each client on its own


def test_a_valid_token_keeps_working_from_a_limited_address(guarded: Web) -> None:
    """The guesses of another client behind the same address (a proxy, a NAT, this
    host) do not stop a token already shown valid: checking it again costs nothing."""
    token = guarded.tokens["admin"]
    with _from(guarded, "127.0.0.10", token) as owner:
        assert owner.get("/api/whoami").status_code == 200
    with _from(guarded, "127.0.0.10", "0123.not-a-token") as bad:
        for _ in range(4):
            bad.get("/api/whoami")
        _error(bad.get("/api/whoami"), 429, "TOO_MANY_SIGN_INS")
    with _from(guarded, "127.0.0.10", token) as owner:
        assert owner.get("/api/whoami").status_code == 200


def test_failed_sign_ins_for_a_user_do_not_lock_that_user_out(guarded: Web) -> None:
    """Wrong tokens and logins for one user from several addresses: each address is
    slowed down for that user, the user elsewhere is not (anyone could lock out admin)."""
    key = guarded.tokens["operator"].partition(".")[0]
    for address in ("127.0.0.4", "127.0.0.5", "127.0.0.6"):
        with _from(guarded, address, f"{key}.wrong-secret") as guess:
            _error(guess.get("/api/whoami"), 401, "UNAUTHENTICATED")
    with _from(guarded, "127.0.0.11") as guess:
        for _ in range(3):
            nonce = _login_form(guess)
            data = {"name": "operator", "token": f"{key}.wrong", "nonce": nonce}
            assert guess.post("/login", data=data).status_code == 401
        nonce = _login_form(guess)
        data = {"name": "operator", "token": guarded.tokens["operator"], "nonce": nonce}
        answer = guess.post("/login", data=data)
        assert answer.status_code == 429, answer.text
        assert "Retry-After" in answer.headers
    with _from(guarded, "127.0.0.7", guarded.tokens["operator"]) as owner:
        assert owner.get("/api/whoami").status_code == 200
    with _from(guarded, "127.0.0.8") as client:
        nonce = _login_form(client)
        data = {"name": "operator", "token": guarded.tokens["operator"], "nonce": nonce}
        assert client.post("/login", data=data).status_code == 303


def test_the_limit_is_logged_once_per_window(guarded: Web) -> None:
    with _from(guarded, "127.0.0.9") as client:
        for _ in range(8):
            nonce = _login_form(client)
            client.post("/login", data={"name": "nobody", "token": "x.y", "nonce": nonce})
    log = guarded.proc.log()
    assert log.count("from address 127.0.0.9") == 1, log[-3000:]
    assert log.count("for user nobody at 127.0.0.9") == 1, log[-3000:]


def test_cookies_are_secure_when_the_setting_says_so(guarded: Web, web: Web) -> None:
    for server, secure in ((guarded, True), (web, False)):
        with httpx.Client(base_url=server.url, timeout=30) as client:
            answer = client.get("/login")
        cookie = answer.headers["set-cookie"].lower()
        assert ("; secure" in cookie) == secure, cookie


def test_the_body_limit_is_a_setting(guarded: Web) -> None:
    with guarded.api(guarded.tokens["admin"]) as client:
        answer = client.post("/api/jobs/x/apply", json={"spec": {"note": "x" * 5000}})
    assert "4096 bytes" in _error(answer, 413, "PAYLOAD_TOO_LARGE")["message"]


class _Conf:
    """What :meth:`WebSettings.from_app` reads: ``app.conf``."""

    def __init__(self, **conf: object) -> None:
        self.conf = conf


@pytest.mark.parametrize(
    ("host", "secure"), [("127.0.0.1", False), ("::1", False), ("0.0.0.0", True), ("web1", True)]
)
def test_cookies_are_secure_by_default_off_loopback(
    host: str, secure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNEL_WEB_SECURE_COOKIES", raising=False)
    assert WebSettings.from_app(_Conf(), host).secure_cookies is secure
    monkeypatch.setenv("KERNEL_WEB_SECURE_COOKIES", "off")
    assert WebSettings.from_app(_Conf(), host).secure_cookies is False


def test_a_malformed_web_setting_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_WEB_MAX_BODY", "1e400")
    with pytest.raises(ConfigInvalid, match="KERNEL_WEB_MAX_BODY='1e400'"):
        WebSettings.from_app(_Conf(), "127.0.0.1")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KERNEL_DATABASE_URL", "notaurl"),
        ("KERNEL_DATABASE_URL", "mysql://x/y"),
        ("KERNEL_WEB_MAX_BODY", "lots"),
        ("KERNEL_WEB_SECURE_COOKIES", "maybe"),
    ],
)
def test_kernel_web_refuses_a_malformed_setting_in_one_line(
    tmp_path: Path, variable: str, value: str
) -> None:
    env = {"KERNEL_DATABASE_URL": f"sqlite:///{tmp_path / 'kernel.db'}", variable: value}
    runner = CliRunner(env={**env, "KERNEL_USERS_FILE": str(tmp_path / "users.json")})
    done = runner.invoke(celery_main, ["-A", "celery_app", "kernel", "web", "--port", "0"])
    assert done.exit_code == 2, (done.output, done.exception)
    assert done.stderr.startswith("Error INVALID_ARGUMENT") and variable in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_run_now_params_reach_that_run_and_bad_ones_are_refused_naming_the_field(
    web: Web,
) -> None:
    job = web.fresh_job(overlap="allow")
    with web.api(web.tokens["operator"]) as client:
        ran = client.post(f"/api/jobs/{job}/run-now", json={"params": {"args": ["b"]}})
        refused = client.post(f"/api/jobs/{job}/run-now", json={"params": {"args": 3}})
    assert ran.status_code == 200, ran.text
    assert web.kernel.get_occurrence(ran.json()["occurrence"]["id"]).payload["args"] == ["b"]
    error = _error(refused, 422, "INVALID_ARGUMENT")
    assert error["details"]["field"] == "params.args"  # type: ignore[index]
    assert len(web.kernel.list_occurrences(job_id=job)) == 1


def test_run_params_cannot_change_what_runs_for_any_role(web: Web) -> None:
    job = web.fresh_job(overlap="allow")
    patch = {"callable": "os:system", "args": ["id"]}
    window = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
    for role in ("operator", "admin"):
        with web.api(web.tokens[role]) as client:
            answers = [
                client.post(f"/api/jobs/{job}/run-now", json={"params": patch}),
                client.post(f"/api/jobs/{job}/backfill", json={**window, "params": patch}),
            ]
        for answer in answers:
            error = _error(answer, 422, "INVALID_ARGUMENT")
            assert error["details"]["field"] == "params.callable"  # type: ignore[index]
            assert "not a run parameter" in str(error["message"])
    assert web.kernel.list_occurrences(job_id=job) == []


@pytest.mark.parametrize("path", ["/static", "/static/", "/jobs/", "/api/jobs/", "/login/"])
def test_no_answer_reflects_the_host_header(web: Web, path: str) -> None:
    # Starlette's slash redirect built an absolute URL from Host: /static -> http://evil/...
    with web.api(web.tokens["viewer"]) as client:
        answer = client.get(path, headers={"Host": "evil.example"})
    assert "evil.example" not in answer.headers.get("location", ""), answer.headers
    assert "evil.example" not in answer.text
