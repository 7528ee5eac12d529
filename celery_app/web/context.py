"""What every web request handler works with: the context, the security headers every
answer carries, and the database the console's footer names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from celery_app.settings import KernelSettings
from celery_app.web.auth import Sessions, SignInLimiter
from celery_app.web.users import UserStore
from celery_app.web_settings import WebSettings
from kernel import Kernel, masked_url

__all__ = ["SECURITY_HEADERS", "WebContext", "database_shown"]

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


def database_shown(app: FastAPI) -> str:
    """The console footer's kernel URL: absolute, its password masked (read at first use,
    so that building the app, as the HTTP reference's generator does, reads no settings)."""
    shown = getattr(app.state, "database", None)
    if shown is None:
        shown = masked_url(KernelSettings.from_app(app.state.context.celery).database_url)
        app.state.database = shown
    return shown
