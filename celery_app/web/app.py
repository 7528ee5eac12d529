"""The ASGI application: the JSON API under ``/api/``, the console everywhere else.

Errors are answered as ``{"error": {"code", "message"}}`` under ``/api/`` and as a
page in the console, with the status their code implies
(:data:`celery_app.web.errors.STATUS_BY_CODE`);
nothing unexpected reaches a client as a traceback (it is logged and answered 500
``INTERNAL``).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from celery_app.web import api, confirm, console, event_log, job_pages, occurrence_pages
from celery_app.web.api_links import add_links
from celery_app.web.context import SECURITY_HEADERS, WebContext
from celery_app.web.door import Door
from celery_app.web.errors import CODE_BY_HTTP, error_body, is_api, refusal
from celery_app.web.read_deadlines import ReadDeadlines
from celery_app.web_settings import WebSettings
from kernel import KernelError

__all__ = ["create_app", "serve"]

log = logging.getLogger(__name__)


def create_app(context: WebContext, *, close_kernel: bool = False) -> FastAPI:
    """The web application over ``context``; with ``close_kernel`` it closes the kernel
    when the server stops."""

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
        # Starlette's slash redirect (/static -> /static/) writes the Host header into an
        # absolute Location: a path that is not a route is a 404 instead.
        redirect_slashes=False,
    )
    app.state.context = context

    def openapi_with_links() -> dict[str, Any]:
        if app.openapi_schema is None:
            add_links(FastAPI.openapi(app))  # built once, kept in app.openapi_schema
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi_with_links  # type: ignore[method-assign]
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
        if is_api(request):
            return JSONResponse(error_body("INVALID_ARGUMENT", problems), 422)
        return console.error_page(request, "INVALID_ARGUMENT", problems, 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = CODE_BY_HTTP.get(exc.status_code, "BAD_REQUEST")
        if is_api(request):
            return JSONResponse(
                error_body(code, str(exc.detail)), exc.status_code, headers=exc.headers
            )
        return console.error_page(request, code, str(exc.detail), exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error answering %s %s", request.method, request.url.path)
        message = f"unexpected {type(exc).__name__}; the server log has the details"
        if is_api(request):
            return JSONResponse(error_body("INTERNAL", message), 500)
        return console.error_page(request, "INTERNAL", message, 500)

    return app


class _Server(uvicorn.Server):
    """uvicorn's server, ending the live streams as soon as it is asked to stop (a
    graceful shutdown waits for every open response, and a stream never ends itself).

    ``X-Forwarded-*`` headers are believed only from ``settings.trusted_proxies``
    (uvicorn's own default believes any loopback client, so anyone on the host picks their
    address); a request is read within ``settings.header_timeout`` and ``body_timeout``.
    """

    def __init__(self, app: FastAPI, host: str, port: int, settings: WebSettings) -> None:
        trusted = settings.trusted_proxies
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="info",
            proxy_headers=bool(trusted),
            forwarded_allow_ips=list(trusted),
            http=partial(
                ReadDeadlines,
                header_timeout=settings.header_timeout,
                body_timeout=settings.body_timeout,
            ),  # type: ignore[arg-type]  # uvicorn calls it as it would a class
        )
        super().__init__(config)
        self.streams = app.state.live

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.streams.stop()
        super().handle_exit(sig, frame)


def serve(app: FastAPI, host: str, port: int, settings: WebSettings) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, as ``settings`` say (proxies, read deadlines)."""
    freeze_startup_heap()
    _Server(app, host, port, settings).run()


def freeze_startup_heap() -> None:
    """Leave what the process holds once the app is built out of the collector's passes.

    That is ~200k objects (Celery, the kernel, FastAPI, the templates), all kept for the
    server's life; a full collection walks them in ~100 ms, and one falling inside a
    request was its p95 (bench/README.md, session 29). Requests' own objects are still
    collected as before.
    """
    gc.collect()
    gc.freeze()
