"""Who is asking and what they may do: bearer tokens for the API, sessions for the console.

A console session lives in this process's memory (a restart logs everyone out): the
cookie holds only a random id, is HttpOnly and SameSite=Strict, and each session has
its own CSRF token that every state-changing form must carry back. A session is
checked against the users file on every request, so removing a user (or giving them
a new token) ends their sessions at once.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass

from fastapi import Request

from celery_app.web.users import Role, User, UserStore, same_secret
from kernel import KernelError

__all__ = [
    "Forbidden",
    "SESSION_COOKIE",
    "Session",
    "Sessions",
    "SignInLimiter",
    "TooManySignIns",
    "Unauthenticated",
    "bearer_user",
    "client_address",
    "refuse_unless",
]

log = logging.getLogger(__name__)

SESSION_COOKIE = "kernel_session"
SESSION_TTL_S = 8 * 3600
#: Failed sign-ins are counted per client address and per user name in windows this long.
SIGN_IN_WINDOW_S = 60.0
#: Counters kept at most before the expired ones are dropped (a flood of addresses).
_COUNTERS_KEPT = 10_000


class Unauthenticated(KernelError):
    """No valid credentials came with the request (HTTP 401)."""

    code = "UNAUTHENTICATED"


class TooManySignIns(KernelError):
    """Too many failed sign-ins from this address or for this user (HTTP 429)."""

    code = "TOO_MANY_SIGN_INS"


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
        if user is None or not same_secret(session.key, user.key):
            self.end(session_id)
            return None
        return session, user


class SignInLimiter:
    """Failed sign-ins per client address and per user name, in one-minute windows.

    A subject past ``limit`` failures is refused before its credentials are checked
    (each check is an scrypt), until its window ends; reaching the limit is logged
    once per window.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[float, int]] = {}  # subject -> (window start, count)

    @staticmethod
    def _subjects(address: str, name: str | None) -> list[str]:
        return [f"address {address}"] + ([f"user {name}"] if name else [])

    def check(self, address: str, name: str | None) -> None:
        """Raise TooManySignIns if the address or the user name is over its limit."""
        now = time.monotonic()
        with self._lock:
            counts = [self._failures.get(s) for s in self._subjects(address, name)]
        ends = [
            start + SIGN_IN_WINDOW_S
            for start, count in filter(None, counts)
            if count >= self.limit and start + SIGN_IN_WINDOW_S > now
        ]
        if ends:
            retry_after = math.ceil(max(ends) - now)
            raise TooManySignIns(
                f"too many failed sign-ins from this address or for this user: "
                f"retry in {retry_after}s",
                retry_after=retry_after,
            )

    def failed(self, address: str, name: str | None) -> None:
        """Count one failed sign-in against the address and the user name."""
        now = time.monotonic()
        with self._lock:
            if len(self._failures) >= _COUNTERS_KEPT:
                self._failures = {
                    s: c for s, c in self._failures.items() if c[0] + SIGN_IN_WINDOW_S > now
                }
            for subject in self._subjects(address, name):
                start, count = self._failures.get(subject, (now, 0))
                if start + SIGN_IN_WINDOW_S <= now:
                    start, count = now, 0
                self._failures[subject] = (start, count + 1)
                if count + 1 == self.limit:
                    log.warning(
                        "sign-ins refused for %ds: %d failed from %s",
                        SIGN_IN_WINDOW_S,
                        self.limit,
                        subject,
                        extra={"action": "web_sign_in_limited", "subject": subject},
                    )


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def bearer_user(request: Request, users: UserStore, limiter: SignInLimiter) -> User:
    """The user of ``Authorization: Bearer TOKEN``.

    Raises:
        Unauthenticated: no token, or not a valid one.
        TooManySignIns: the client address or the token's user failed too often lately.
    """
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(
            "send `Authorization: Bearer TOKEN` (make one with `kernel users add`)"
        )
    address, name = client_address(request), users.owner(token)
    limiter.check(address, name)
    user = users.authenticate(token)
    if user is None:
        limiter.failed(address, name)
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
