"""Masking what must not be shown: database URL passwords and stored secret-like values.

Secrets should be referred to by name (``payload.secrets``, ``payload.secret_headers``)
so their values are never stored. Values stored anyway are masked wherever kernel
data is shown: every ``payload.env`` value (its meaning is unknown, so all of them) and
headers whose name says they carry credentials.
"""

from __future__ import annotations

import copy
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MASK", "masked_url", "is_sensitive_name", "redacted_spec"]

MASK = "***"
_SENSITIVE = re.compile(
    r"auth|token|secret|passw|pwd|cookie|credential|api[-_]?key|private|session|signature"
    # KEY as a word of the name (SSH_KEY, Key-Id), but not Idempotency-Key: that one
    # names the request, it grants nothing.
    r"|(?<![a-z])(?<!idempotency[-_])keys?(?![a-z])",
    re.IGNORECASE,
)


def masked_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``; anything else unchanged.

    ``postgresql://kernel:s3cret@db/kernel`` → ``postgresql://kernel:***@db/kernel``.
    Text that does not parse as a URL is masked after its last ``:`` before an ``@``.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return re.sub(r":[^:/@]*@", f":{MASK}@", url)
    if not password:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{name}:{MASK}@{host}"))


def is_sensitive_name(name: str) -> bool:
    """Whether a header or variable called ``name`` probably carries a credential."""
    return bool(_SENSITIVE.search(name))


def redacted_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a job spec (or occurrence definition) fit to show: stored secrets masked."""
    shown = copy.deepcopy(spec)
    payload = shown.get("payload")
    if not isinstance(payload, dict):
        return shown
    env = payload.get("env")
    if isinstance(env, dict):
        payload["env"] = {name: MASK for name in env}
    headers = payload.get("headers")
    if isinstance(headers, dict):
        payload["headers"] = {
            name: MASK if is_sensitive_name(name) else value for name, value in headers.items()
        }
    url = payload.get("url")
    if isinstance(url, str):
        payload["url"] = _masked_query(masked_url(url))
    return shown


def _masked_query(url: str) -> str:
    """``url`` with the values of its secret-like query parameters (``?token=``) masked."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = [pair.partition("=") for pair in parts.query.split("&")]
    query = "&".join(
        f"{name}{sep}{MASK if sep and is_sensitive_name(name) else value}"
        for name, sep, value in pairs
    )
    return urlunsplit(parts._replace(query=query))
