"""Readers for job-spec values: durations, times, JSON, and the typed scalar checks.

Every reader takes ``(value, field)`` and either returns the normalised value or raises
:class:`~kernel.errors.InvalidArgument` naming ``field``, a dotted path such as
``retry.backoff``. Factories (``text(128)``, ``integer(1, 1000)`` ...) build readers; the
spec's models (:mod:`kernel.spec`) declare each field with one of them.

Durations are ``"30s"``, ``"15m"``, ``"2h"``, ``"1d"`` (or several parts, ``"1h30m"``;
decimals allowed, ``"1.5h"``), a number of seconds (also as text, ``"60"``: how an
environment variable arrives), or a :class:`datetime.timedelta`
(how ``app.conf.beat_schedule`` intervals arrive). Times are 5-field cron expressions,
IANA zone names and ISO 8601 instants with an offset.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from kernel.errors import InvalidArgument

__all__ = [
    "EARLIEST_INSTANT",
    "LATEST_INSTANT",
    "MAX_DURATION_S",
    "MAX_JSON_DEPTH",
    "Reader",
    "boolean",
    "canonical_json",
    "child_path",
    "choice",
    "cron_expression",
    "duration",
    "instant",
    "integer",
    "parse_duration",
    "payload_json",
    "rate",
    "rate_interval_ms",
    "rate_limit_name",
    "real",
    "text",
    "time_zone",
]

T = TypeVar("T")
#: A reader: ``(value, field) -> normalised value``, raising ``InvalidArgument(field)``.
Reader = Callable[[object, str], T]

#: Ten years: every duration stays well inside ``datetime`` arithmetic.
MAX_DURATION_S = 10 * 366 * 86400.0
#: The instants a schedule may name. Beat's planner adds and subtracts durations (up to
#: ``MAX_DURATION_S``: an interval, a catch-up window, jitter) and walks sparse crons
#: decades past the last firing it needs; these bounds keep all of it inside the years
#: ``datetime`` can hold (1-9999), so no schedule can make the planner overflow.
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
#: Deeper JSON is refused rather than risking recursion limits further down.
MAX_JSON_DEPTH = 64

_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
# ASCII digits only: Python's \d (and float()) would also take "６０" and "٦٠".
_NUMBER = r"[0-9]{1,12}(?:\.[0-9]{1,9})?"
_PART = re.compile(rf"({_NUMBER})([dhms])")
_WHOLE = re.compile(rf"(?:{_PART.pattern})+")
_BARE = re.compile(_NUMBER)
_PATH_WORD = re.compile(r"[A-Za-z0-9_-]+")
_CRON_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# croniter's R (random) and H (hashed) pick times per process: two Beats would disagree
# about which firing is due, and the idempotency key could no longer deduplicate them.
_CRON_PER_PROCESS = re.compile(r"(?:^|,)[RrHh](?![A-Za-z])")
_CRON_PROBE = datetime(2000, 1, 1, tzinfo=UTC)
# Category Cc is exactly U+0000-U+001F and U+007F-U+009F. Lone surrogates go with them:
# they are not text (no UTF-8 encoding exists), and PostgreSQL refuses them.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_EXCEPT_TAB_NL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_duration(value: object, field: str, *, allow_zero: bool = False) -> float:
    """Read a duration and return it in seconds.

    Args:
        value: ``"30s"``-style text, a number of seconds (``60`` or ``"60"``) or a
            ``timedelta``.
        field: the dotted spec path named in the error (``"retry.backoff"``).
        allow_zero: accept ``0`` (e.g. a chain's delay); otherwise it must be > 0.

    Returns:
        Seconds as a float, so equal durations compare equal however they were written.

    Raises:
        InvalidArgument: wrong type, unparseable text, negative, zero (unless allowed),
            not finite, or longer than ``MAX_DURATION_S``.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, float):
        seconds = value
    elif isinstance(value, int) and not isinstance(value, bool):
        # Clamp first: float() of a huge int overflows; the clamped value still fails below.
        seconds = float(max(-1, min(value, int(MAX_DURATION_S) + 1)))
    elif isinstance(value, str) and _BARE.fullmatch(value):
        seconds = float(value)
    elif isinstance(value, str) and _WHOLE.fullmatch(value):
        seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _PART.findall(value))
    else:
        raise InvalidArgument(
            field, "must be a duration such as '30s', '15m', '2h', '1d' or a number of seconds"
        )
    if not math.isfinite(seconds):
        raise InvalidArgument(field, "must be finite")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidArgument(field, "must not be negative" if allow_zero else "must be positive")
    if seconds > MAX_DURATION_S:
        raise InvalidArgument(field, f"must be at most {MAX_DURATION_S:.0f} seconds (10 years)")
    return seconds


#: One encoder for every canonical text (``json.dumps`` makes one per call with these).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_PLAIN_SCALARS = frozenset({int, bool, type(None)})


def canonical_json(value: object, field: str) -> str:
    """Encode ``value`` as canonical JSON: sorted keys, no spaces, raw UTF-8, no NaN.

    Tuples encode as arrays. ``field`` names ``value`` in errors.

    Raises:
        InvalidArgument: ``value`` holds something JSON cannot carry (a set, a non-string
            key, NaN, a lone surrogate, nesting deeper than ``MAX_JSON_DEPTH``); the
            field names the exact spot, e.g. ``payload.args[2]``.
    """
    flat = type(value) is list and all(
        type(v) in _PLAIN_SCALARS or (type(v) is str and not _SURROGATE.search(v)) for v in value
    )  # most runs' arguments: their own plain copy, no walk (bench/README session 21)
    plain = value if flat else _plain(value, field, _SURROGATE, _SURROGATE, 0)
    try:
        return _CANONICAL.encode(plain)
    except ValueError as exc:  # e.g. an int past Python's digit limit for str()
        raise InvalidArgument(field, f"cannot be encoded as JSON: {exc}") from None


def payload_json(value: object, field: str) -> Any:
    """A plain-JSON copy of a payload (tuples become lists, str subclasses plain str).

    Keys refuse every control character; values allow ``\\n`` and ``\\t`` (a script
    argument or request body may be multi-line).
    """
    return _plain(value, field, _CONTROL, _CONTROL_EXCEPT_TAB_NL, 0)


def child_path(field: str, key: str) -> str:
    """The path of a key under ``field``: ``a.b`` when plain, ``a["b c"]`` otherwise."""
    if not _PATH_WORD.fullmatch(key):
        return f"{field}[{json.dumps(key)}]"
    return f"{field}.{key}" if field else key


def text(
    max_len: int, pattern: re.Pattern[str] | None = None, *, empty: bool = False
) -> Reader[str]:
    """A string of at most ``max_len`` characters, no control characters, matching ``pattern``."""

    def read(value: object, field: str) -> str:
        if not isinstance(value, str):
            raise InvalidArgument(field, "must be a string")
        if not value and not empty:
            raise InvalidArgument(field, "must not be empty")
        if len(value) > max_len:
            raise InvalidArgument(field, f"must be at most {max_len} characters")
        _refuse_chars(value, field, _CONTROL)
        if pattern is not None and not pattern.fullmatch(value):
            raise InvalidArgument(field, f"must match {pattern.pattern}")
        return str(value)

    return read


def choice(*options: str) -> Reader[str]:
    """One of ``options``, exactly as spelt."""

    def read(value: object, field: str) -> str:
        if not isinstance(value, str) or value not in options:
            raise InvalidArgument(field, f"must be one of {', '.join(options)}")
        return str(value)

    return read


def boolean(value: object, field: str) -> bool:
    """A real bool: 0 and 1 are refused."""
    if not isinstance(value, bool):
        raise InvalidArgument(field, "must be true or false")
    return value


def integer(lo: int, hi: int) -> Reader[int]:
    """A real int (bool refused) within ``[lo, hi]``."""

    def read(value: object, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(field, "must be an integer")
        if not lo <= value <= hi:
            raise InvalidArgument(field, f"must be between {lo} and {hi}")
        return int(value)

    return read


def real(lo: float, hi: float) -> Reader[float]:
    """An int or float (bool refused) within ``[lo, hi]``, returned as float."""

    def read(value: object, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidArgument(field, "must be a number")
        if not lo <= value <= hi:  # NaN fails this too
            raise InvalidArgument(field, f"must be between {lo:g} and {hi:g}")
        return float(value)

    return read


def duration(
    lo: float = 0.0, hi: float = MAX_DURATION_S, *, allow_zero: bool = False
) -> Reader[float]:
    """A duration (see :func:`parse_duration`) within ``[lo, hi]`` seconds."""

    def read(value: object, field: str) -> float:
        seconds = parse_duration(value, field, allow_zero=allow_zero)
        if not lo <= seconds <= hi:
            raise InvalidArgument(field, f"must be between {lo:g}s and {hi:g}s")
        return seconds

    return read


#: A rate's unit as Celery writes it (``"30/m"``), in milliseconds.
_RATE_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}
_RATE = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)(?:/([smh]))?")


def rate(value: object, field: str) -> str:
    """Celery's ``rate_limit``: ``"N/s"``, ``"N/m"``, ``"N/h"`` or a number (per second),
    as ``"N/unit"``. The kernel spaces runs in whole milliseconds: at most 1000/s."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = repr(float(value))
    found = _RATE.fullmatch(value.strip()) if isinstance(value, str) else None
    if found is None or float(found[1]) <= 0:
        raise InvalidArgument(
            field, f"{value!r} is not a rate: write runs per unit, e.g. '30/m', '2/s', '100/h'"
        )
    text = f"{float(found[1]):g}/{found[2] or 's'}"
    if rate_interval_ms(text) < 1:
        raise InvalidArgument(field, f"{value!r}: at most 1000/s (runs are spaced in ms)")
    return text


#: A task's runs share its rate limit whatever job made them (Beat entries, enqueues), as
#: Celery keeps one per task; another kind's, its job's.
_TASK_LIMIT = "task:"


def rate_limit_name(spec: Mapping[str, Any]) -> str | None:
    """The rate limit whose token a claim of a run of ``spec`` takes; None: it has none."""
    if not spec.get("rate_limit"):
        return None
    if spec["kind"] == "task":
        return f"{_TASK_LIMIT}{spec['payload']['task']}"
    return str(spec["id"])


def rate_interval_ms(text: str) -> int:
    """The least time between two runs under a rate read by :func:`rate`, as Celery's
    token bucket (capacity 1) spaces them."""
    count, unit = text.split("/")
    return int(_RATE_UNIT_MS[unit] / float(count))


def cron_expression(value: object, field: str) -> str:
    """A 5-field cron expression (or @daily-style nickname), whitespace normalised."""
    written = text(256)(value, field)
    expr = _CRON_NICKNAMES.get(written.strip().lower()) or " ".join(written.split())
    parts = expr.split(" ")
    if len(parts) != 5:
        raise InvalidArgument(
            field, "must have 5 fields (minute hour day month weekday); seconds are not supported"
        )
    if any(_CRON_PER_PROCESS.search(part) for part in parts):
        raise InvalidArgument(field, "random (R) and hashed (H) cron fields are not supported")
    try:
        if not croniter.is_valid(expr):
            raise InvalidArgument(field, f"{expr!r} is not a valid cron expression")
        croniter(expr, _CRON_PROBE).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidArgument(field, f"{expr!r} never fires") from None
    except ValueError as exc:  # croniter's other errors are ValueErrors too
        raise InvalidArgument(field, f"{expr!r} is not a valid cron expression: {exc}") from None
    return expr


def time_zone(value: object, field: str) -> str:
    """An IANA time zone name that ``zoneinfo`` can load."""
    name = text(128)(value, field)
    # "localtime" resolves to each host's own setting: Beats on two hosts would disagree.
    if name == "localtime":
        raise InvalidArgument(field, "must name an IANA time zone, not the host's localtime")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(field, f"unknown IANA time zone {name!r}") from None
    return name


def instant(value: object, field: str) -> str:
    """An ISO 8601 date-time with an offset (or an aware datetime) from
    :data:`EARLIEST_INSTANT` to :data:`LATEST_INSTANT`, as UTC text ``...Z``."""
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(text(64)(value, field))
        except ValueError:
            raise InvalidArgument(field, "must be an ISO 8601 date-time") from None
    if moment.utcoffset() is None:
        raise InvalidArgument(field, "must carry a UTC offset, e.g. 2026-11-29T12:00:00Z")
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST_INSTANT <= utc <= LATEST_INSTANT:
        raise InvalidArgument(
            field, f"must be from {_iso(EARLIEST_INSTANT)} to {_iso(LATEST_INSTANT)}"
        )
    return _iso(utc)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _refuse_chars(value: str, field: str, refused: re.Pattern[str]) -> None:
    found = refused.search(value)
    if found:
        code = ord(found.group())
        what = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "a control character"
        raise InvalidArgument(field, f"contains {what} (U+{code:04X})")


def _plain(
    value: object, field: str, bad_key: re.Pattern[str], bad_text: re.Pattern[str], depth: int
) -> Any:
    """A plain-JSON copy of ``value``, refusing what JSON cannot carry and strings holding
    a character of ``bad_key`` (in keys) or ``bad_text`` (in values)."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(field, f"nests deeper than {MAX_JSON_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(field, "must be a finite number")
        return float(value)
    if isinstance(value, str):
        _refuse_chars(value, field, bad_text)
        return str(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(field, f"has a {type(key).__name__} key; keys are strings")
            path = child_path(field, key)
            _refuse_chars(key, path, bad_key)
            out[str(key)] = _plain(item, path, bad_key, bad_text, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [
            _plain(item, f"{field}[{index}]", bad_key, bad_text, depth + 1)
            for index, item in enumerate(value)
        ]
    raise InvalidArgument(field, f"holds a {type(value).__name__}, which is not JSON")
