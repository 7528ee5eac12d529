"""What every request passes before the application reads it: body size and API credentials.

An API request is authenticated here, from its headers alone, so an anonymous client
never gets a byte of its body read; a body larger than ``kernel_web_max_body`` is
refused 413 from its declared length before it is read, and one without a length is
cut off at the limit while it streams in (never buffered whole).
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from celery_app.web.auth import bearer_user
from celery_app.web.context import WebContext
from celery_app.web.errors import refusal
from kernel import KernelError

__all__ = ["BodyTooLarge", "Door"]


class BodyTooLarge(KernelError):
    """The request body is larger than the server accepts (HTTP 413)."""

    code = "PAYLOAD_TOO_LARGE"


class Door:
    """ASGI middleware: refuse oversize bodies and unauthenticated API requests up front."""

    def __init__(self, app: ASGIApp, context: WebContext) -> None:
        self.app = app
        self.context = context

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        limit = self.context.settings.max_body
        try:
            if request.url.path.startswith("/api/"):  # the contract, /openapi.json, is public
                context = self.context
                user = await run_in_threadpool(
                    bearer_user, request, context.users, context.sign_ins
                )
                scope.setdefault("state", {})["user"] = user
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise BodyTooLarge(
                    f"the request body ({declared} bytes) is larger than this server accepts "
                    f"({limit} bytes, kernel_web_max_body)",
                    limit=limit,
                )
        except KernelError as exc:
            await refusal(request, exc)(scope, receive, send)
            return
        await self.app(scope, _limited(receive, limit), send)


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive`` that refuses the body once more than ``limit`` bytes have come in."""
    received = 0

    async def receive_within_limit() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            # An HTTPException: FastAPI lets it through its body parsing unchanged.
            raise HTTPException(
                413, f"the request body is larger than this server accepts ({limit} bytes)"
            )
        return message

    return receive_within_limit
