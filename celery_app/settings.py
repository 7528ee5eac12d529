"""celery-kernel's settings: one object from ``app.conf`` and the environment, checked at start.

Every setting is read in one place and refused with :class:`ConfigInvalid`, which
names the environment variable or Celery key it came from, the value, and what is
allowed. Entry points turn it into exit code 2 (:data:`CONFIG_EXIT`) and one line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kernel import InvalidArgument, KernelError
from kernel.durations import parse_duration
from kernel.engine import CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_S

__all__ = [
    "CONFIG_EXIT",
    "INTERRUPTED_EXIT",
    "ConfigInvalid",
    "KernelSettings",
    "RETENTION_DEFAULTS",
    "var_dir",
]

#: The exit code of every entry point refusing its configuration.
CONFIG_EXIT = 2
#: The exit code of every entry point stopped by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED_EXIT = 130
T = TypeVar("T")
_FLAGS = {"1": True, "true": True, "yes": True, "on": True}
_FLAGS.update({"0": False, "false": False, "no": False, "off": False})


class ConfigInvalid(InvalidArgument):
    """A setting that cannot work; ``field`` is the variable or key the value came from.

    The message reads ``NAME='value': expected <what is allowed>`` (or the problem found).
    """

    def __init__(self, name: str, value: Any, expected: str, *, problem: str | None = None) -> None:
        KernelError.__init__(
            self, f"{name}={value!r}: {problem or 'expected ' + expected}", field=name, value=value
        )
        self.field = name


def var_dir() -> Path:
    """Where the embedded defaults keep their files: ``KERNEL_VAR_DIR``, else ``./var``."""
    return Path(os.environ.get("KERNEL_VAR_DIR") or "var")


class _Source:
    """Reads one setting: the environment variable wins over the Celery key."""

    def __init__(self, conf: Any) -> None:
        self.conf = conf
        self.names: dict[str, str] = {}

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
        if value in (None, ""):
            value = self.conf.get(key, default)
        self.names[attr] = name or key
        try:
            return convert(value)
        except (TypeError, ValueError, KeyError):
            raise ConfigInvalid(name or key, value, allowed) from None


def _number(low: float, high: float) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        number = float(value)
        if not low <= number <= high:  # also refuses nan
            raise ValueError(value)
        return number

    return convert


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(value)
        return number

    return convert


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else _FLAGS[str(value).strip().lower()]


def _synchronous(value: Any) -> str:
    mode = str(value).strip().upper()
    if mode not in ("FULL", "NORMAL"):
        raise ValueError(value)
    return mode


def _age(value: Any) -> float | None:
    """A retention age: a duration (``30d``, ``12h``, seconds) or ``off`` (kept forever)."""
    if isinstance(value, str) and value.strip().lower() in ("off", "none", "never"):
        return None
    try:
        return parse_duration(value, "retention")
    except InvalidArgument:
        raise ValueError(value) from None


def _optional_text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


#: How long Beat keeps finished history by default, per status (``off``: forever).
RETENTION_DEFAULTS: dict[str, str] = {"succeeded": "30d", "cancelled": "30d", "skipped": "7d"}


@dataclass(frozen=True)
class KernelSettings:
    """celery-kernel's settings (Celery ``kernel_*`` keys; environment variables win).

    Attributes:
        database_url: ``KERNEL_DATABASE_URL`` / ``kernel_database_url``; default a
            SQLite file under ``KERNEL_VAR_DIR`` (default ``./var/``).
        jobs_file: ``KERNEL_JOBS_FILE`` / ``kernel_jobs_file``: a job file Beat applies at start.
        sqlite_synchronous: ``FULL`` (default, survives power loss) or ``NORMAL`` (opt-in).
        auto_migrate: create/upgrade the schema when a worker or Beat starts.
        beat_interval: seconds between Beat ticks.
        dispatch_batch: hints published per tick at most.
        rehint_after: seconds before an unclaimed occurrence is hinted again.
        batch_max: occurrence ids one hint carries at most when a queue's backlog is deep.
        connect_timeout: seconds to connect to PostgreSQL before STORAGE_UNAVAILABLE.
        statement_timeout: seconds one PostgreSQL statement may run.
        beat_retention: seconds after its last tick before a silent Beat is forgotten.
        retention: seconds Beat keeps the history of each prunable status (``succeeded``,
            ``cancelled``, ``skipped``: ``KERNEL_RETENTION_SUCCEEDED`` ...); None keeps it.
        retention_interval: seconds between Beat's retention passes.
        retention_batch: occurrences (and jobs) one retention pass deletes at most.
        watchdog_grace: seconds a firing may be overdue, or a run past its timeout,
            before the watchdog reports it.
        names: where each attribute came from (variable or key), for messages.
    """

    database_url: str
    jobs_file: str | None
    sqlite_synchronous: str
    auto_migrate: bool
    beat_interval: float
    dispatch_batch: int
    rehint_after: float
    batch_max: int
    connect_timeout: float
    statement_timeout: float
    beat_retention: float
    retention: dict[str, float | None]
    retention_interval: float
    retention_batch: int
    watchdog_grace: float
    names: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_app(cls, app: Any) -> KernelSettings:
        """Read and check every setting.

        Raises:
            ConfigInvalid: a value cannot work; the message names its variable or key.
        """
        source = _Source(app.conf)
        read = source.read
        default_url = f"sqlite:///{var_dir() / 'kernel.db'}"
        seconds = "a number of seconds"
        settings = cls(
            database_url=read(
                "database_url",
                "KERNEL_DATABASE_URL",
                "kernel_database_url",
                default_url,
                str,
                "a SQLAlchemy URL",
            ),
            jobs_file=read(
                "jobs_file", "KERNEL_JOBS_FILE", "kernel_jobs_file", None, _optional_text, "a path"
            ),
            sqlite_synchronous=read(
                "sqlite_synchronous",
                "KERNEL_SQLITE_SYNCHRONOUS",
                "kernel_sqlite_synchronous",
                "FULL",
                _synchronous,
                "FULL or NORMAL",
            ),
            auto_migrate=read(
                "auto_migrate",
                "KERNEL_AUTO_MIGRATE",
                "kernel_auto_migrate",
                True,
                _flag,
                "true or false (1/0, yes/no, on/off)",
            ),
            beat_interval=read(
                "beat_interval",
                "KERNEL_BEAT_INTERVAL",
                "kernel_beat_interval",
                1.0,
                _number(0.05, 300),
                f"{seconds} from 0.05 to 300",
            ),
            dispatch_batch=read(
                "dispatch_batch",
                None,
                "kernel_dispatch_batch",
                500,
                _integer(1, 10_000),
                "a whole number from 1 to 10000",
            ),
            rehint_after=read(
                "rehint_after",
                None,
                "kernel_rehint_after",
                30.0,
                _number(0.01, 86_400),
                f"{seconds} from 0.01 to 86400",
            ),
            batch_max=read(
                "batch_max",
                None,
                "kernel_batch_max",
                16,
                _integer(1, 1000),
                "a whole number from 1 to 1000",
            ),
            connect_timeout=read(
                "connect_timeout",
                "KERNEL_CONNECT_TIMEOUT",
                "kernel_connect_timeout",
                CONNECT_TIMEOUT_S,
                _number(1, 3600),
                f"{seconds} from 1 to 3600",
            ),
            statement_timeout=read(
                "statement_timeout",
                "KERNEL_STATEMENT_TIMEOUT",
                "kernel_statement_timeout",
                STATEMENT_TIMEOUT_S,
                _number(0.1, 86_400),
                f"{seconds} from 0.1 to 86400",
            ),
            beat_retention=read(
                "beat_retention",
                "KERNEL_BEAT_RETENTION",
                "kernel_beat_retention",
                600.0,
                _number(1, 30 * 86_400),
                f"{seconds} from 1 to 2592000",
            ),
            retention={
                status: read(
                    f"retention_{status}",
                    f"KERNEL_RETENTION_{status.upper()}",
                    f"kernel_retention_{status}",
                    default,
                    _age,
                    "a duration (30d, 12h, seconds) or off",
                )
                for status, default in RETENTION_DEFAULTS.items()
            },
            retention_interval=read(
                "retention_interval",
                "KERNEL_RETENTION_INTERVAL",
                "kernel_retention_interval",
                60.0,
                _number(1, 86_400),
                f"{seconds} from 1 to 86400",
            ),
            retention_batch=read(
                "retention_batch",
                "KERNEL_RETENTION_BATCH",
                "kernel_retention_batch",
                500,
                _integer(1, 100_000),
                "a whole number from 1 to 100000",
            ),
            watchdog_grace=read(
                "watchdog_grace",
                "KERNEL_WATCHDOG_GRACE",
                "kernel_watchdog_grace",
                60.0,
                _number(1, 86_400),
                f"{seconds} from 1 to 86400",
            ),
            names=source.names,
        )
        if settings.database_url == default_url:
            settings.names["database_url"] = "KERNEL_VAR_DIR"
        return settings

    def require_jobs_file(self) -> str | None:
        """The job file Beat applies, which must exist (only Beat reads it).

        Raises:
            ConfigInvalid: it is set and is not a readable file.
        """
        if self.jobs_file is not None and not Path(self.jobs_file).is_file():
            raise ConfigInvalid(
                self.names.get("jobs_file", "KERNEL_JOBS_FILE"),
                self.jobs_file,
                "an existing job file (JSON, TOML or YAML), or no value",
            )
        return self.jobs_file
