"""How the web app answers a refusal: the HTTP status of each error code, and the error
shape under ``/api/`` (``{"error": {"code", "message"}}``) or a console page elsewhere."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from celery_app.web import console
from kernel import KernelError

__all__ = ["CODE_BY_HTTP", "STATUS_BY_CODE", "error_body", "error_status", "is_api", "refusal"]

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
CODE_BY_HTTP = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
}


def error_status(code: str) -> int:
    return STATUS_BY_CODE.get(code, 400)


def is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/openapi.json"


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


def refusal(request: Request, exc: KernelError) -> Response:
    """The answer to a refused request: the error shape under ``/api/``, else a page."""
    status = error_status(exc.code)
    headers = {}
    if status == 401 and is_api(request):
        headers["WWW-Authenticate"] = "Bearer"
    if "retry_after" in exc.details:
        headers["Retry-After"] = str(exc.details["retry_after"])
    if is_api(request):
        response: Response = JSONResponse(
            error_body(exc.code, exc.message, exc.details), status, headers=headers
        )
    else:
        response = console.error_page(request, exc.code, exc.message, status)
        response.headers.update(headers)
    return response
