"""A setting's value: where it is read from (environment, app configuration or default),
how it is parsed and checked, and :class:`ConfigInvalid`, which refuses it naming the
environment variable or Celery key it came from, the value, and what is allowed.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from typing import Any, TypeVar

from kernel import MAX_DURATION_S, InvalidArgument, KernelError, duration, masked_url

__all__ = [
    "FROM_APP",
    "FROM_DEFAULT",
    "FROM_ENV",
    "ConfigInvalid",
    "SettingSource",
    "age",
    "conf_key",
    "flag",
    "glob_patterns",
    "networks",
    "number_between",
    "optional_duration",
    "optional_text",
    "seconds_between",
    "source_name",
    "synchronous_mode",
]

T = TypeVar("T")
_FLAGS = {"1": True, "true": True, "yes": True, "on": True}
_FLAGS.update({"0": False, "false": False, "no": False, "off": False})


class ConfigInvalid(InvalidArgument):
    """A setting that cannot work; ``field`` is the variable or key the value came from.

    The message reads ``NAME='value': expected <what is allowed>`` (or the problem found).
    """

    def __init__(self, name: str, value: Any, expected: str, *, problem: str | None = None) -> None:
        shown = masked_url(value) if isinstance(value, str) else value  # a URL's password
        KernelError.__init__(
            self, f"{name}={shown!r}: {problem or 'expected ' + expected}", field=name, value=shown
        )
        self.field = name


#: Where a setting's value came from, as ``kernel doctor`` shows it.
FROM_ENV, FROM_APP, FROM_DEFAULT = "environment", "app configuration", "default"


def conf_key(conf: Any, key: str) -> str | None:
    """The name ``key`` has in the app's configuration, if set there: under a namespace
    (``namespace="CELERY"``) Celery finds ``CELERY_KERNEL_X`` before ``kernel_x``."""
    prefix = getattr(conf, "prefix", None)
    if prefix and conf.get(prefix + key.upper()) is not None:
        return str(prefix + key.upper())
    return key if conf.get(key) is not None else None


class SettingSource:
    """Reads one setting: the environment variable wins over the Celery key."""

    def __init__(self, conf: Any) -> None:
        self.conf = conf
        self.names: dict[str, str] = {}
        self.origins: dict[str, str] = {}
        self.keys: dict[str, str] = {}

    def read(
        self,
        attr: str,
        env: str | None,
        key: str,
        default: Any,
        convert: Callable[[Any], T],
        allowed: str,
    ) -> T:
        value = os.environ.get(env) if env else None
        name = env if value not in (None, "") else key
        self.keys[attr] = key
        if value in (None, ""):
            name = conf_key(self.conf, key) or key
            self.origins[attr] = FROM_APP if conf_key(self.conf, key) else FROM_DEFAULT
            value = self.conf.get(key, default)
        else:
            self.origins[attr] = FROM_ENV
        self.names[attr] = name or key
        try:
            return convert(value)
        except (TypeError, ValueError, KeyError, OverflowError):  # Overflow: int(inf)
            raise ConfigInvalid(name or key, value, allowed) from None


def seconds_between(low: float, high: float) -> Callable[[Any], float]:
    """A duration setting: seconds (``60``, ``"60"``) or ``"2m"``, read as job files read
    durations."""
    read = duration(low, high)

    def convert(value: Any) -> float:
        try:
            return read(value, "")
        except InvalidArgument:
            raise ValueError(value) from None

    return convert


def number_between(low: int, high: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(value)
        return number

    return convert


def flag(value: Any) -> bool:
    return value if isinstance(value, bool) else _FLAGS[str(value).strip().lower()]


def synchronous_mode(value: Any) -> str:
    mode = str(value).strip().upper()
    if mode not in ("FULL", "NORMAL"):
        raise ValueError(value)
    return mode


def age(value: Any) -> float | None:
    """A retention age: a duration (``30d``, ``12h``, seconds) or ``off`` (kept forever)."""
    if isinstance(value, str) and value.strip().lower() in ("off", "none", "never"):
        return None
    return seconds_between(0.0, MAX_DURATION_S)(value)


def optional_duration(value: Any) -> float | None:
    """A duration (``30m``, seconds), or unset / ``off`` (None)."""
    if value is None or value == "":
        return None
    return age(value)


def optional_text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def source_name(value: Any) -> str:
    """A job source's name: 1 to 64 printable characters (the kernel's ``job_sources``)."""
    name = str(value).strip()
    if not 0 < len(name) <= 64 or not name.isprintable():
        raise ValueError(value)
    return name


def glob_patterns(value: Any) -> tuple[str, ...] | None:
    """Glob patterns, comma-separated or a list; unset (None) allows everything."""
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    patterns = tuple(str(name).strip() for name in names if str(name).strip())
    if not patterns:
        raise ValueError(value)
    return patterns


def networks(value: Any) -> tuple[str, ...]:
    listed = value.split(",") if isinstance(value, str) else list(value)
    return tuple(
        str(ipaddress.ip_network(str(item).strip())) for item in listed if str(item).strip()
    )
