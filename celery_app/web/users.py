"""Who may use the console and the HTTP API: users, roles and hashed tokens in a file.

The file is ``KERNEL_USERS_FILE`` (default ``$KERNEL_VAR_DIR/users.json``), written
only by ``celery -A celery_app kernel users ...`` with mode 0600::

    {"users": {"alice": {"role": "operator", "key": "3f9c...", "hash": "scrypt$..."}}}

A token is ``<key>.<secret>``: the key finds the user without trying every hash, the
secret is checked against its scrypt hash with a constant-time compare. Tokens are
shown once, when made; the file never holds one. The web server re-reads the file
when it changes, so a removed user is refused from the next request on. Edits take
an exclusive lock (``<file>.lock``) and replace the file atomically, so concurrent
``users add``/``remove`` never lose an entry.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery_app.project_paths import var_dir
from kernel import InvalidArgument, NotFound

__all__ = ["Role", "User", "UserStore", "same_secret", "users_file"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
# scrypt at n=2**14, r=8 costs ~16 MiB and tens of ms: a stolen file resists guessing,
# and verified tokens are remembered in memory so a busy API does not pay it per request.
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}
_SALT_BYTES = 16


class Role(enum.IntEnum):
    """What a user may do; each role may do everything the ones below it may."""

    VIEWER = 1  # read everything
    OPERATOR = 2  # pause, resume, cancel, run-now, requeue, adjudicate
    ADMIN = 3  # job definitions: enable, disable, delete; prune

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str) -> Role:
        try:
            return cls[value.upper()]
        except KeyError:
            raise InvalidArgument(
                "role", f"unknown role {value!r}: use viewer, operator or admin"
            ) from None


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated identity: recorded as the operator of every action it takes."""

    name: str
    role: Role
    key: str

    def may(self, needed: Role) -> bool:
        return self.role >= needed


def users_file() -> Path:
    """``KERNEL_USERS_FILE``, else ``users.json`` under ``KERNEL_VAR_DIR``."""
    return Path(os.environ.get("KERNEL_USERS_FILE") or var_dir() / "users.json")


def same_secret(given: str, expected: str) -> bool:
    """Whether ``given`` is ``expected`` (ASCII: keys, tokens, ids), in constant time.

    Whatever a client sends is only compared: a non-ASCII value is simply not the
    secret (``hmac.compare_digest`` would raise on it).
    """
    return given.isascii() and hmac.compare_digest(given, expected)


def _hash(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT, dklen=32)


def _encode(secret: str) -> str:
    salt = secrets.token_bytes(_SALT_BYTES)
    return f"scrypt${salt.hex()}${_hash(secret, salt).hex()}"


def _matches(secret: str, stored: str) -> bool:
    scheme, _, rest = stored.partition("$")
    salt_hex, _, digest_hex = rest.partition("$")
    if scheme != "scrypt":
        return False
    try:
        salt, digest = bytes.fromhex(salt_hex), bytes.fromhex(digest_hex)
    except ValueError:
        return False
    return hmac.compare_digest(_hash(secret, salt), digest)


# A hash to check unknown keys against, so a wrong key costs what a wrong secret does.
_DECOY = _encode(secrets.token_urlsafe(16))


class UserStore:
    """The users file: read (and re-read when it changes), and edited atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._users: dict[str, dict[str, Any]] = {}
        self._verified: dict[str, str] = {}  # sha256(token) -> user name

    # -- reading -----------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            with self._lock:
                self._seen, self._users, self._verified = None, {}, {}
            return {}
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._seen:
                self._seen, self._users, self._verified = stamp, self._read(), {}
            return self._users

    def _read(self) -> dict[str, dict[str, Any]]:
        """The file's users as stored now (none if it does not exist yet)."""
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            users = document["users"]
            if not isinstance(users, dict):
                raise TypeError("users is not an object")
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(
                "KERNEL_USERS_FILE", f"{self.path} is not a users file: {exc}"
            ) from None
        return users

    def list(self) -> list[User]:
        return [
            User(name, Role.parse(entry["role"]), entry["key"])
            for name, entry in sorted(self._load().items())
        ]

    def get(self, name: str) -> User | None:
        entry = self._load().get(name)
        return None if entry is None else User(name, Role.parse(entry["role"]), entry["key"])

    def owner(self, token: str) -> str | None:
        """The name of the user whose key ``token`` starts with (the token unverified)."""
        key = token.partition(".")[0]
        users = self._load()
        return next((name for name, entry in users.items() if same_secret(key, entry["key"])), None)

    def remembered(self, token: str) -> User | None:
        """The user of ``token`` if it was verified since the file last changed (no scrypt)."""
        if not token.isascii():
            return None
        users = self._load()
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            known = self._verified.get(digest)
        return self.get(known) if known is not None and known in users else None

    def authenticate(self, token: str) -> User | None:
        """The user whose token this is, or None."""
        if not token.isascii():
            return None  # tokens are ASCII: this one was never issued
        if (known := self.remembered(token)) is not None:
            return known
        users = self._load()
        digest = hashlib.sha256(token.encode()).hexdigest()
        match = self.owner(token)
        entry = users.get(match) if match is not None else None
        stored = entry["hash"] if entry is not None else _DECOY
        if not _matches(token.partition(".")[2], stored) or match is None or entry is None:
            return None
        with self._lock:
            self._verified[digest] = match
        return self.get(match)

    def login(self, name: str, token: str) -> User | None:
        """The user ``name`` if ``token`` is theirs (the console's login form)."""
        user = self.authenticate(token)
        return user if user is not None and same_secret(name, user.name) else None

    # -- editing (the CLI) -------------------------------------------------------

    def add(self, name: str, role: Role) -> tuple[User, str]:
        """Create ``name`` with ``role`` (or give an existing user a new token and role).

        Returns the user and the token, which is not stored and cannot be shown again.
        """
        if not _NAME.fullmatch(name):
            raise InvalidArgument(
                "name", f"{name!r}: 1-64 letters, digits, '_', '.', '@' or '-', not leading"
            )
        key, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        entry = {"role": role.label, "key": key, "hash": _encode(secret)}
        with self._editing() as users:
            users[name] = entry
        return User(name, role, key), f"{key}.{secret}"

    def remove(self, name: str) -> None:
        with self._editing() as users:
            if users.pop(name, None) is None:
                raise NotFound(f"no user {name!r} in {self.path}", user=name)

    @contextlib.contextmanager
    def _editing(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The users as stored, to change in place; written back when the block ends.

        Editors (any process) take turns on an exclusive lock of ``<file>.lock`` and
        each reads the file afresh under it, so concurrent edits never lose one
        another's entries; readers never wait, as the new file replaces the old one
        atomically.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            users = self._read()
            yield users
            self._replace(users)
        finally:
            os.close(lock)  # releases the lock

    def _replace(self, users: dict[str, dict[str, Any]]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".users-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"users": users}, out, indent=2, sort_keys=True)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
