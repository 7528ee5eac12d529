"""The ASGI application: the JSON API under ``/api/``, the console everywhere else.

Errors are answered as ``{"error": {"code", "message"}}`` under ``/api/`` and as a
page in the console, with the status their code implies (:data:`STATUS_BY_CODE`);
nothing unexpected reaches a client as a traceback (it is logged and answered 500
``INTERNAL``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from celery_app.settings import KernelSettings, WebSettings
from celery_app.web.auth import Sessions, SignInLimiter
from celery_app.web.users import UserStore
from kernel import Kernel, KernelError
from kernel.redaction import masked_url

__all__ = [
    "STATUS_BY_CODE",
    "WebContext",
    "create_app",
    "database_shown",
    "error_status",
    "refusal",
    "serve",
]

log = logging.getLogger(__name__)

STATUS_BY_CODE = {
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "INVALID_ARGUMENT": 422,
    "FENCE_CONFLICT": 409,
    "REVISION_CONFLICT": 409,
    "STATE_CONFLICT": 409,
    "EVIDENCE_CONFLICT": 409,
    "PAUSE_UNSUPPORTED": 409,
    "LEASE_LOST": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "TOO_MANY_SIGN_INS": 429,
    "TOO_MANY_STREAMS": 503,
    "SCHEMA_UNKNOWN": 503,
    "STORAGE_UNAVAILABLE": 503,
}
_CODE_BY_HTTP = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
}

# Same-origin only, no inline script or style, never framed.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass
class WebContext:
    """What every request handler works with."""

    celery: Any
    kernel: Kernel
    users: UserStore
    sessions: Sessions
    settings: WebSettings
    sign_ins: SignInLimiter


def error_status(code: str) -> int:
    return STATUS_BY_CODE.get(code, 400)


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/openapi.json"


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


def refusal(request: Request, exc: KernelError) -> Response:
    """The answer to a refused request: the error shape under ``/api/``, else a page."""
    # The console's pages need the names defined here.
    from celery_app.web import console

    status = error_status(exc.code)
    headers = {}
    if status == 401 and _is_api(request):
        headers["WWW-Authenticate"] = "Bearer"
    if "retry_after" in exc.details:
        headers["Retry-After"] = str(exc.details["retry_after"])
    if _is_api(request):
        response: Response = JSONResponse(
            error_body(exc.code, exc.message, exc.details), status, headers=headers
        )
    else:
        response = console.error_page(request, exc.code, exc.message, status)
        response.headers.update(headers)
    return response


def create_app(context: WebContext, *, close_kernel: bool = False) -> FastAPI:
    """The web application over ``context``; with ``close_kernel`` it closes the kernel
    when the server stops."""
    # The routers need the names defined above.
    from celery_app.web import api, confirm, console, event_log, job_pages, occurrence_pages
    from celery_app.web.door import Door

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if close_kernel:
            context.kernel.close()

    app = FastAPI(
        title="celery-kernel",
        version="1",
        description=(
            "The kernel's resources and operator actions; the same JSON shapes as "
            "`celery -A celery_app kernel ... --json`. Authenticate with "
            "`Authorization: Bearer TOKEN` (`kernel users add`)."
        ),
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.context = context
    app.include_router(api.router)
    app.include_router(console.router)
    app.include_router(job_pages.router)
    app.include_router(occurrence_pages.router)
    app.include_router(confirm.router)
    app.include_router(event_log.router)
    app.state.live = event_log.LiveStreams()
    app.mount("/static", StaticFiles(directory=console.STATIC_DIR), name="static")
    app.add_exception_handler(console.LoginNeeded, console.login_redirect)
    app.add_middleware(Door, context=context)  # innermost: the headers below cover it too

    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @app.exception_handler(KernelError)
    async def kernel_error(request: Request, exc: KernelError) -> Response:
        return refusal(request, exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}"
            for e in exc.errors()
        )
        if _is_api(request):
            return JSONResponse(error_body("INVALID_ARGUMENT", problems), 422)
        return console.error_page(request, "INVALID_ARGUMENT", problems, 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = _CODE_BY_HTTP.get(exc.status_code, "BAD_REQUEST")
        if _is_api(request):
            return JSONResponse(
                error_body(code, str(exc.detail)), exc.status_code, headers=exc.headers
            )
        return console.error_page(request, code, str(exc.detail), exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error answering %s %s", request.method, request.url.path)
        message = f"unexpected {type(exc).__name__}; the server log has the details"
        if _is_api(request):
            return JSONResponse(error_body("INTERNAL", message), 500)
        return console.error_page(request, "INTERNAL", message, 500)

    return app


class _Server(uvicorn.Server):
    """uvicorn's server, ending the live streams as soon as it is asked to stop (a
    graceful shutdown waits for every open response, and a stream never ends itself)."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        super().__init__(uvicorn.Config(app, host=host, port=port, log_level="info"))
        self.streams = app.state.live

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.streams.stop()
        super().handle_exit(sig, frame)


def serve(app: FastAPI, host: str, port: int) -> None:
    """Serve ``app`` until SIGINT or SIGTERM."""
    _Server(app, host, port).run()


def database_shown(app: FastAPI) -> str:
    """The console footer's kernel URL: absolute, its password masked (read at first use,
    so that building the app, as the HTTP reference's generator does, reads no settings)."""
    shown = getattr(app.state, "database", None)
    if shown is None:
        shown = masked_url(KernelSettings.from_app(app.state.context.celery).database_url)
        app.state.database = shown
    return shown
