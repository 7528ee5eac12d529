"""The operator console: server-rendered pages over the same operations as the API.

Every page needs a login (a session cookie); every state-changing form carries the
session's CSRF token and is refused without it, or from another origin. An action is
two steps: its button opens a confirmation page (which mints the request id, so a
double submit is answered ``deduplicated``), and the confirmed POST shows the result.
Buttons appear only for actions the user's role allows; the server refuses the rest
whatever is posted.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import APIRouter, Depends, Form, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from celery_app import operations
from celery_app.operations import describe_schedule, format_age, format_json
from celery_app.shell import celery_command
from celery_app.web import charts
from celery_app.web.actions import ACTIONS, WebAction
from celery_app.web.auth import (
    SESSION_COOKIE,
    SESSION_TTL_S,
    Forbidden,
    Session,
    Unauthenticated,
    client_address,
)
from celery_app.web.context import SECURITY_HEADERS, WebContext, database_shown
from celery_app.web.users import User, same_secret
from kernel import EventCursor

__all__ = [
    "STATIC_DIR",
    "Context",
    "LoginNeeded",
    "PageCursor",
    "PageLogin",
    "allowed_actions",
    "error_page",
    "login_redirect",
    "render",
    "router",
    "stream_url",
]

STATIC_DIR = Path(__file__).with_name("static")
_LOGIN_COOKIE = "kernel_login"
#: The overview's throughput chart: the last hour, a bar per two minutes.
_THROUGHPUT_S = 3600
_THROUGHPUT_BUCKETS = 30

router = APIRouter(include_in_schema=False)
_templates = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters["age"] = format_age
_templates.filters["pretty"] = lambda value: format_json(value, indent=2)
_templates.filters["compact"] = lambda value: _shortened(format_json(value))
_templates.globals["schedule"] = describe_schedule
_templates.globals["celery_command"] = celery_command


def _shortened(text: str, limit: int = 400) -> str:
    """A table cell's text: whole when short, else its start (the page it links to has
    the rest)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _context(request: Request) -> WebContext:
    context: WebContext = request.app.state.context
    return context


Context = Annotated[WebContext, Depends(_context)]


def render(
    request: Request,
    name: str,
    status_code: int = 200,
    *,
    login: tuple[Session, User] | None = None,
    **values: Any,
) -> HTMLResponse:
    session, user = login if login else (None, None)
    html = _templates.get_template(name).render(
        request=request,
        user=user,
        csrf=session.csrf if session else None,
        database=database_shown(request.app),
        **values,
    )
    return HTMLResponse(html, status_code)


def _page_cursor(context: Context) -> EventCursor:
    return context.kernel.event_cursor()


#: The event log's position before a page reads anything (a dependency runs before the
#: page's body): an event committed while the page is read is still streamed to it, where
#: a position taken after its reads would skip it and leave the page stale for good.
PageCursor = Annotated[EventCursor, Depends(_page_cursor)]


def stream_url(cursor: EventCursor, query: Sequence[tuple[str, str]] = ()) -> str:
    """The live stream (see :mod:`.event_log`) of the events a page shows (``query``: its
    filters), from ``cursor`` (its :data:`PageCursor`)."""
    return "/live?" + urlencode([*query, ("after", cursor.token)])


def error_page(request: Request, code: str, message: str, status_code: int) -> Response:
    """A refusal as a page (the console's side of ``{"error": {"code", "message"}}``)."""
    context = _context(request)
    login = context.sessions.find(request, context.users)
    return render(request, "error.html", status_code, login=login, code=code, message=message)


# -- who is asking ----------------------------------------------------------------


def _page_login(request: Request, context: Context) -> tuple[Session, User]:
    found = context.sessions.find(request, context.users)
    if found is None:
        raise LoginNeeded(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return found


class LoginNeeded(Exception):
    """A page asked for without a session: the answer is a redirect to the login form."""

    def __init__(self, then: str) -> None:
        self.then = then


PageLogin = Annotated[tuple[Session, User], Depends(_page_login)]
OccurrencePath = Annotated[int, PathParam(ge=1, le=2**63 - 1)]
JobPath = Annotated[str, PathParam(min_length=1, max_length=200)]


def _same_origin(request: Request) -> None:
    """Refuse a form posted from another site (defence beside the CSRF token)."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden("the form was posted from another origin")


async def _form_login(request: Request, context: Context) -> tuple[Session, User]:
    """The session of a state-changing POST, whose form must carry its CSRF token."""
    _same_origin(request)
    found = context.sessions.find(request, context.users)
    if found is None:
        raise Unauthenticated("log in first: the session is missing or has ended")
    form = await request.form()
    token = form.get("csrf")
    if not isinstance(token, str) or not same_secret(token, found[0].csrf):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and retry")
    return found


FormLogin = Annotated[tuple[Session, User], Depends(_form_login)]


def _safe_next(target: str | None) -> str:
    """Only a local path may be the page after login (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


# -- login ------------------------------------------------------------------------


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    nonce = secrets.token_urlsafe(32)
    response = render(request, "login.html", nonce=nonce, then=_safe_next(next))
    _set_cookie(request, response, _LOGIN_COOKIE, nonce, 600)
    return response


@router.post("/login")
def login(
    request: Request,
    context: Context,
    name: Annotated[str, Form(max_length=64)],
    token: Annotated[str, Form(max_length=256)],
    nonce: Annotated[str, Form(max_length=128)],
    then: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    _same_origin(request)
    expected = request.cookies.get(_LOGIN_COOKIE, "")
    if not expected or not same_secret(nonce, expected):
        raise Forbidden("the login form expired: reload it and try again")
    address = client_address(request)
    context.sign_ins.check(address, name)
    user = context.users.login(name, token)
    if user is None:
        context.sign_ins.failed(address, name)
        retry = secrets.token_urlsafe(32)
        response = render(
            request,
            "login.html",
            401,
            nonce=retry,
            then=_safe_next(then),
            failed="wrong user name or token",
        )
        _set_cookie(request, response, _LOGIN_COOKIE, retry, 600)
        return response
    session = context.sessions.start(user)
    redirect = RedirectResponse(_safe_next(then), status_code=303)
    _set_cookie(request, redirect, SESSION_COOKIE, session.id, SESSION_TTL_S)
    redirect.delete_cookie(_LOGIN_COOKIE, path="/")
    return redirect


@router.post("/logout")
def logout(request: Request, context: Context, login: FormLogin) -> Response:
    context.sessions.end(login[0].id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def _set_cookie(request: Request, response: Response, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=_context(request).settings.secure_cookies or request.url.scheme == "https",
    )


# -- pages ------------------------------------------------------------------------


@router.get("/")
def overview(request: Request, context: Context, login: PageLogin, cursor: PageCursor) -> Response:
    status = operations.status(context.kernel, context.celery)
    controls = operations.runtime_controls(context.kernel, 200)
    return render(
        request,
        "overview.html",
        login=login,
        status=status,
        controls=controls,
        throughput=charts.throughput(
            operations.throughput(context.kernel, _THROUGHPUT_S, _THROUGHPUT_BUCKETS)
        ),
        actions=allowed_actions(login, "kernel"),
        stream=stream_url(cursor),
    )


#: Swagger UI's stylesheet draws its icons as data: images.
_DOCS_POLICY = SECURITY_HEADERS["Content-Security-Policy"].replace(
    "img-src 'self'", "img-src 'self' data:"
)


@router.get("/docs")
def api_docs(request: Request) -> Response:
    """Swagger UI over ``/openapi.json`` (public, as that document is)."""
    response = render(request, "docs.html")
    response.headers["Content-Security-Policy"] = _DOCS_POLICY
    return response


def allowed_actions(login: tuple[Session, User], target: str) -> list[WebAction]:
    return [a for a in ACTIONS.values() if a.target == target and login[1].may(a.role)]


def login_redirect(request: Request, exc: Exception) -> Response:
    """The answer to :class:`LoginNeeded`: the login form, then back to the page."""
    assert isinstance(exc, LoginNeeded)
    return RedirectResponse(f"/login?next={quote(exc.then)}", status_code=303)
