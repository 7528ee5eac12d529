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
from collections.abc import Callable
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
#: Failed sign-ins are forgotten after this long without one; the longest wait they cause.
SIGN_IN_WINDOW_S = 60.0
#: The first wait past the limit, doubled by each further failure.
SIGN_IN_BACKOFF_S = 10.0
#: Counters kept at most before the expired ones are dropped (a flood of addresses).
_COUNTERS_KEPT = 10_000


class Unauthenticated(KernelError):
    """No valid credentials came with the request (HTTP 401)."""

    code = "UNAUTHENTICATED"


class TooManySignIns(KernelError):
    """Too many failed sign-ins from this address, or for this user at it (HTTP 429)."""

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
    """Failed sign-ins per client address, and per user name at that address.

    No count is kept per user name alone: anyone could then lock a named user (admin)
    out from everywhere. Past ``limit`` failures a subject is refused before its
    credentials are checked (each check is an scrypt) for a while after its last
    failure: :data:`SIGN_IN_BACKOFF_S`, doubled by each further failure, at most
    :data:`SIGN_IN_WINDOW_S`. A quiet window forgets the failures; reaching the limit
    is logged once per run of failures.
    """

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[int, float]] = {}  # subject -> (count, last failure)

    @staticmethod
    def _subjects(address: str, name: str | None) -> list[str]:
        return [f"from address {address}"] + ([f"for user {name} at {address}"] if name else [])

    def _refused_until(self, subject: str) -> float:
        count, last = self._failures.get(subject, (0, 0.0))
        if count < self.limit:
            return 0.0
        return last + min(SIGN_IN_BACKOFF_S * 2.0 ** (count - self.limit), SIGN_IN_WINDOW_S)

    def check(self, address: str, name: str | None) -> None:
        """Raise TooManySignIns if the address, or the user name at it, must wait."""
        now = self._clock()
        with self._lock:
            until = max(self._refused_until(s) for s in self._subjects(address, name))
        if until > now:
            retry_after = math.ceil(until - now)
            raise TooManySignIns(
                f"too many failed sign-ins from this address: retry in {retry_after}s",
                retry_after=retry_after,
            )

    def failed(self, address: str, name: str | None) -> None:
        """Count one failed sign-in against the address and the user name at it."""
        now = self._clock()
        with self._lock:
            if len(self._failures) >= _COUNTERS_KEPT:
                self._failures = {
                    s: c for s, c in self._failures.items() if c[1] + SIGN_IN_WINDOW_S > now
                }
            for subject in self._subjects(address, name):
                count, last = self._failures.get(subject, (0, now))
                count = 1 if now - last >= SIGN_IN_WINDOW_S else count + 1
                self._failures[subject] = (count, now)
                if count == self.limit:
                    log.warning(
                        "sign-ins slowed down after %d failed %s",
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
        TooManySignIns: the client address (or the token's user at it) failed too often
            lately, and the token was not already shown valid.
    """
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(
            "send `Authorization: Bearer TOKEN` (make one with `kernel users add`)"
        )
    remembered = users.remembered(token)
    if remembered is not None:  # shown valid before: costs no scrypt, guesses nothing
        return remembered
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
