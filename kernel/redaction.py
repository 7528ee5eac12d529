"""Masking what must not be shown: credentials in URLs and DSNs, stored secret-like values.

Secrets should be referred to by name (``payload.secrets``, ``payload.secret_headers``)
so their values are never stored. Values stored anyway are masked wherever kernel
data is shown: every ``payload.env`` value (its meaning is unknown, so all of them) and
headers whose name says they carry credentials (an http request's, a Celery call's).
"""

from __future__ import annotations

import copy
import re
from typing import Any

__all__ = ["MASK", "masked_url", "holds_credential", "is_sensitive_name", "redacted_spec"]

MASK = "***"
_SENSITIVE = re.compile(
    r"auth|token|secret|passw|pwd|cookie|credential|api[-_]?key|private|session|signature"
    # KEY as a word of the name (SSH_KEY, Key-Id), but not Idempotency-Key: that one
    # names the request, it grants nothing.
    r"|(?<![a-z])(?<!idempotency[-_])keys?(?![a-z])"
    # Short names as words of the name (DB_PASS, LDAP_PW, SENTRY_DSN), not BYPASS or DSNAME.
    r"|(?<![a-z])(?:pass|passphrase|pw|dsn)(?![a-z])",
    re.IGNORECASE,
)


def masked_url(text: str) -> str:
    """``text`` with every credential it holds replaced by ``***``; anything else unchanged.

    ``text`` is a database or broker URL, a libpq key-value DSN, or a message quoting
    them. Masked: the password of each URL's userinfo (``amqp://guest:***@rabbit//``,
    ``redis://:***@cache:6379/0``, each URL of a ``;``-separated failover list) and the
    value of every ``name=value`` whose name says it carries a credential, in a query or
    in a DSN (``?password=***``, ``?sslpassword=***``, ``host=db password=***``, quoted
    values too).
    """
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _KEY_VALUE.sub(
        lambda m: f"{m['key']}{m['eq']}{MASK}" if is_sensitive_name(m["key"]) else m[0], text
    )


# ``scheme://user:password@``: the password runs to the URL's last ``@`` (an unescaped
# ``@``, ``/`` or quote in it must not leave a piece showing); a URL ends at a space or
# the ``;`` of a failover list.
_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][\w+.-]*://)(?P<user>[^\s;:/@'\"]*):[^\s;]*@(?=[^\s;@]*(?:[\s;]|$))"
)
# ``name=value`` in a query (``&``-separated) or a DSN (space-separated, maybe quoted).
_KEY_VALUE = re.compile(
    r"(?P<key>[A-Za-z_][\w.-]*)(?P<eq>\s*=\s*)"
    r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;]*)"
)


def is_sensitive_name(name: str) -> bool:
    """Whether a header or variable called ``name`` probably carries a credential."""
    return bool(_SENSITIVE.search(name))


def holds_credential(value: str) -> bool:
    """Whether ``value`` carries a credential whatever its name: a URL with a password in
    its userinfo (``DATABASE_URL=postgresql://app:pw@db/app``) or a DSN's ``password=``."""
    return masked_url(value) != value


def redacted_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a job spec (or occurrence definition) fit to show: stored secrets masked."""
    shown = copy.deepcopy(spec)
    payload = shown.get("payload")
    if not isinstance(payload, dict):
        return shown
    env = payload.get("env")
    if isinstance(env, dict):
        payload["env"] = {name: MASK for name in env}
    # An http request's headers, and those a task's Celery call gave (payload.request).
    request = payload.get("request")
    for holder in (payload, request if isinstance(request, dict) else {}):
        headers = holder.get("headers")
        if isinstance(headers, dict):
            holder["headers"] = {
                name: MASK if is_sensitive_name(name) else value for name, value in headers.items()
            }
    url = payload.get("url")
    if isinstance(url, str):
        payload["url"] = masked_url(url)
    return shown
