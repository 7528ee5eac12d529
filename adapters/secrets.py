"""Secrets a job refers to by name, looked up on the worker when the run starts.

A job holds only the secret's name (shell ``payload.secrets``, http
``payload.secret_headers``), so the value is never stored in the kernel. A name is
looked up in the JSON object of the file named by ``KERNEL_SECRETS_FILE`` (``{"NAME":
"value"}``, read at each lookup so a rotated secret needs no restart), then in the
worker's environment. The values found are also what :func:`scrub` removes from a
run's error messages and :class:`StreamScrubber` from its captured output, each in the
forms a program commonly prints it (:func:`secret_forms`).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from adapters.base import AdapterError

__all__ = [
    "SECRETS_FILE_ENV",
    "resolve_secrets",
    "masked_prefix",
    "scrub",
    "scrub_value",
    "secret_reach",
    "secret_forms",
    "StreamScrubber",
]

SECRETS_FILE_ENV = "KERNEL_SECRETS_FILE"
MASK = "***"


def resolve_secrets(names: Mapping[str, str]) -> dict[str, str]:
    """``{target: value}`` for ``{target: secret name}``.

    Raises:
        AdapterError: non-retryable ``SECRET_MISSING`` naming the secret (never a value),
            or ``SECRETS_FILE_UNREADABLE``.
    """
    if not names:
        return {}
    found = _secrets_file()
    values = {}
    for target, name in names.items():
        value = found.get(name, os.environ.get(name))
        if value is None:
            where = os.environ.get(SECRETS_FILE_ENV)
            source = f"the secrets file {where!r} or " if where else ""
            raise AdapterError(
                "SECRET_MISSING",
                f"secret {name!r} (for {target}) is not in {source}the worker's environment",
                retryable=False,
            )
        values[target] = value
    return values


# An encoded form shorter than this would mask unrelated text while hiding little.
_MIN_ENCODED = 6


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form (:func:`secret_forms`) of each secret value replaced by ``***``."""
    found = _forms_pattern(frozenset(secrets))
    return text if found is None else found[0].sub(MASK, text)


def scrub_value(value: Any, secrets: Iterable[str]) -> Any:
    """A JSON-like ``value`` (a run's result) with every string in it scrubbed, keys too."""
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {scrub_value(k, secrets): scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(item, secrets) for item in value]
    return value


def secret_reach(secrets: Iterable[str]) -> int:
    """Bytes a reader must read past a cut so that a secret lying across it is whole in
    what was read (0 without secrets): see :func:`masked_prefix`."""
    found = _forms_pattern(frozenset(secrets))
    return 0 if found is None else 4 * found[1]  # UTF-8: at most 4 bytes a character


def masked_prefix(text: str, limit: int, secrets: Iterable[str], *, complete: bool) -> str:
    """At most ``limit`` characters from the start of ``text``, secrets masked before the
    cut, so a secret lying across it leaves no piece.

    ``text`` is a whole (``complete``), or the start of something longer read at least
    :func:`secret_reach` past ``limit``: then its last characters, which may begin a secret
    the unread rest completes, are left out with that rest.
    """
    scrubber = StreamScrubber()
    masked = scrubber.feed(text, secrets)
    if complete:
        masked += scrubber.close(secrets)
    return masked[:limit]


def secret_forms(value: str) -> set[str]:
    """``value`` as a program commonly prints it: itself, JSON-escaped, URL-encoded (upper-
    and lower-case escapes), hex and base64.

    Base64 is matched wherever the value sits in the encoded bytes: for each of the three
    alignments, the characters that depend on the value alone (so ``user:secret`` encoded
    for a Basic header is caught too), standard and URL-safe alphabets. :func:`scrub` also
    finds a base64 form broken by line ends (MIME and PEM wrap at 64 or 76 columns, at
    whatever offset the value fell).
    """
    return _text_forms(value) | _base64_forms(value)


def _text_forms(value: str) -> set[str]:
    if not value:
        return set()
    quoted = {quote(value, safe=""), quote(value), quote_plus(value)}
    quoted |= {_PERCENT_ESCAPE.sub(lambda m: m[0].lower(), form) for form in quoted}
    escaped = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    escaped |= {form.replace("/", "\\/") for form in escaped}  # JSON may escape "/" too
    data = value.encode()
    encoded = quoted | {data.hex(), data.hex().upper()}
    return {value} | escaped | {form for form in encoded if len(form) >= _MIN_ENCODED}


_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _base64_forms(value: str) -> set[str]:
    if not value:
        return set()
    data = value.encode()
    exact = base64.b64encode(data).decode()
    encoded = {exact, exact.rstrip("=")}
    for skipped, lead in ((0, 0), (1, 2), (2, 3)):
        # ``skipped`` bytes before the value share its first 3-byte group; the first
        # ``lead`` characters mix them in, and a trailing character may mix what follows.
        text = base64.b64encode(bytes(skipped) + data).decode()
        encoded.add(text[lead : (8 * (skipped + len(data))) // 6])
    encoded |= {form.replace("+", "-").replace("/", "_") for form in encoded}
    return {form for form in encoded if len(form) >= _MIN_ENCODED}


class StreamScrubber:
    """Masks secrets in one output stream that arrives in pieces of any size.

    A secret may be split across pipe reads or writes, so the last characters of each
    piece (one fewer than the longest secret form) are held back until the next piece
    or :meth:`close` shows whether they start a secret; nothing returned ever holds a
    secret or a piece of one that a later piece completes.
    """

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str, secrets: Iterable[str]) -> str:
        """The masked text that can be released now that ``text`` has arrived."""
        held = self._held + text
        found = _forms_pattern(frozenset(secrets))
        if found is None:
            self._held = ""
            return held
        pattern, longest = found
        # A form starting before ``settled`` lies wholly inside ``held``.
        settled = len(held) - (longest - 1)
        released: list[str] = []
        at = 0
        for match in pattern.finditer(held):
            if match.start() >= settled:
                break
            released += [held[at : match.start()], MASK]
            at = match.end()
        cut = max(at, settled)
        released.append(held[at:cut])
        self._held = held[cut:]
        return "".join(released)

    def close(self, secrets: Iterable[str]) -> str:
        """The rest of the stream, masked: the stream has ended."""
        held, self._held = self._held, ""
        return scrub(held, secrets)


@functools.lru_cache(maxsize=64)
def _forms_pattern(secrets: frozenset[str]) -> tuple[re.Pattern[str], int] | None:
    """One pattern matching every form of every secret (longest first), and the longest
    text a match can span (a wrapped base64 form holds a line end per 64 characters)."""
    text = {form for value in secrets for form in _text_forms(value)}
    wrapped = {form for value in secrets for form in _base64_forms(value)} - text
    if not text and not wrapped:
        return None
    pieces = [(len(form), re.escape(form)) for form in text]
    pieces += [(len(form), _LINE_END.join(map(re.escape, form))) for form in wrapped]
    pieces.sort(key=lambda piece: piece[0], reverse=True)
    longest = max(len(form) + 2 * (len(form) // 64 + 1) for form in text | wrapped)
    return re.compile("|".join(piece for _, piece in pieces)), longest


_LINE_END = r"(?:\r?\n)?"


def _secrets_file() -> dict[str, str]:
    path = os.environ.get(SECRETS_FILE_ENV)
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not valid JSON"
        raise AdapterError(
            "SECRETS_FILE_UNREADABLE",
            f"cannot read {SECRETS_FILE_ENV}={path!r}: {reason}",
            retryable=True,
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise AdapterError(
            "SECRETS_FILE_UNREADABLE",
            f"{SECRETS_FILE_ENV}={path!r} must hold a JSON object of name: string value",
            retryable=True,
        )
    return data
