"""Who is asking and what they may do: bearer tokens for the API, sessions for the console.

A console session lives in this process's memory (a restart logs everyone out): the
cookie holds only a random id, is HttpOnly and SameSite=Strict, and each session has
its own CSRF token that every state-changing form must carry back. A session is
checked against the users file on every request, so removing a user (or giving them
a new token) ends their sessions at once.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from fastapi import Request

from celery_app.web.users import Role, User, UserStore
from kernel import KernelError

__all__ = [
    "Forbidden",
    "SESSION_COOKIE",
    "Session",
    "Sessions",
    "Unauthenticated",
    "bearer_user",
    "refuse_unless",
]

SESSION_COOKIE = "kernel_session"
SESSION_TTL_S = 8 * 3600


class Unauthenticated(KernelError):
    """No valid credentials came with the request (HTTP 401)."""

    code = "UNAUTHENTICATED"


class Forbidden(KernelError):
    """The caller's role may not do this, or a form lacked its CSRF token (HTTP 403)."""

    code = "FORBIDDEN"


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    user: str
    key: str  # the user's token key at login: a new token ends the session
    csrf: str
    expires: float


class Sessions:
    """Console sessions by id, in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def start(self, user: User) -> Session:
        session = Session(
            secrets.token_urlsafe(32),
            user.name,
            user.key,
            secrets.token_urlsafe(32),
            time.monotonic() + SESSION_TTL_S,
        )
        now = time.monotonic()
        with self._lock:
            self._by_id = {k: s for k, s in self._by_id.items() if s.expires > now}
            self._by_id[session.id] = session
        return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._by_id.pop(session_id, None)

    def find(self, request: Request, users: UserStore) -> tuple[Session, User] | None:
        """The live session named by the request's cookie, with its (current) user."""
        session_id = request.cookies.get(SESSION_COOKIE)
        if not session_id:
            return None
        with self._lock:
            session = self._by_id.get(session_id)
        if session is None or session.expires <= time.monotonic():
            return None
        user = users.get(session.user)
        if user is None or not hmac.compare_digest(user.key, session.key):
            self.end(session_id)
            return None
        return session, user


def bearer_user(request: Request, users: UserStore) -> User:
    """The user of ``Authorization: Bearer TOKEN``; Unauthenticated otherwise."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated(
            "send `Authorization: Bearer TOKEN` (make one with `kernel users add`)"
        )
    user = users.authenticate(token.strip())
    if user is None:
        raise Unauthenticated("the bearer token is not valid (revoked, or never issued)")
    return user


def refuse_unless(user: User, needed: Role, what: str) -> None:
    """Raise Forbidden unless ``user``'s role covers ``needed``."""
    if not user.may(needed):
        raise Forbidden(
            f"{what} needs the {needed.label} role; {user.name} is {user.role.label}",
            needed=needed.label,
            role=user.role.label,
        )
