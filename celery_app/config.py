"""celery-kernel's settings: one object from ``app.conf`` and the environment, checked at start.

Every setting is read in one place and refused with :class:`ConfigInvalid`, which
names the environment variable or Celery key it came from, the value, and what is
allowed. Entry points turn it into exit code 2 (:data:`CONFIG_EXIT`) and one line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from kernel import InvalidArgument, Kernel, KernelError
from kernel.durations import parse_duration
from kernel.engine import CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_S, create_kernel_engine
from kernel.redaction import masked_url

__all__ = [
    "CONFIG_EXIT",
    "ConfigInvalid",
    "KernelSettings",
    "var_dir",
    "embedded_broker_options",
    "ensure_broker_folders",
    "kernel_engine",
    "kernel_engine_options",
    "open_kernel",
    "refuse_start",
]

#: The exit code of every entry point refusing its configuration.
CONFIG_EXIT = 2
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


def embedded_broker_options() -> dict[str, Any]:
    """kombu ``filesystem://`` folders: a serverless broker shared by the processes of one host."""
    broker = var_dir().absolute() / "broker"
    return {
        "data_folder_in": str(broker / "queue"),
        "data_folder_out": str(broker / "queue"),
        "control_folder": str(broker / "control"),
        "store_processed": False,
    }


def ensure_broker_folders(app: Any) -> None:
    """Create the embedded broker's folders; only processes that use the broker call this.

    Raises:
        ConfigInvalid: a folder cannot be created or written (naming ``KERNEL_VAR_DIR``
            when the folder is one of its defaults).
    """
    options = app.conf.broker_transport_options or {}
    defaults = embedded_broker_options()
    for key in ("data_folder_in", "data_folder_out", "control_folder"):
        folder = options.get(key)
        if not folder:
            continue
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            writable = os.access(folder, os.W_OK | os.X_OK)
        except (OSError, ValueError) as exc:
            writable, reason = False, getattr(exc, "strerror", None) or str(exc)
        else:
            reason = "not writable"
        if not writable:
            name, value = (
                ("KERNEL_VAR_DIR", str(var_dir()))
                if folder == defaults[key]
                else (f"broker_transport_options[{key!r}]", folder)
            )
            raise ConfigInvalid(
                name, value, "a folder this process can write", problem=f"{folder}: {reason}"
            )


def kernel_engine_options(settings: KernelSettings, *, must_exist: bool) -> dict[str, Any]:
    """The engine options every process opens the kernel with."""
    return {
        "sqlite_synchronous": settings.sqlite_synchronous,
        "connect_timeout": settings.connect_timeout,
        "statement_timeout": settings.statement_timeout,
        "must_exist": must_exist,
    }


def kernel_engine(settings: KernelSettings) -> Any:
    """An engine for ``kernel migrate``, which may create the database.

    Raises:
        ConfigInvalid: the URL or its folder cannot be used.
    """
    return _configured(
        settings,
        lambda: create_kernel_engine(
            settings.database_url, **kernel_engine_options(settings, must_exist=False)
        ),
    )


def open_kernel(app: Any, *, migrate: bool | None = None) -> Kernel:
    """Open the kernel the app is configured for (schema migrated when ``auto_migrate``).

    Without migrating, a SQLite file that does not exist is refused (``SCHEMA_UNKNOWN``,
    naming the path) rather than created empty.

    Raises:
        ConfigInvalid: a setting cannot work.
        SchemaUnknown, StorageUnavailable: as :meth:`Kernel.open`.
    """
    settings = KernelSettings.from_app(app)
    migrating = settings.auto_migrate if migrate is None else migrate
    return _configured(
        settings,
        lambda: Kernel.open(
            settings.database_url,
            migrate_schema=migrating,
            **kernel_engine_options(settings, must_exist=not migrating),
        ),
    )


def _configured(settings: KernelSettings, make: Callable[[], T]) -> T:
    """Run ``make``, naming the setting behind an InvalidArgument about the database URL."""
    try:
        return make()
    except ConfigInvalid:
        raise
    except InvalidArgument as exc:
        if exc.field != "database_url":
            raise
        name = settings.names.get("database_url", "KERNEL_DATABASE_URL")
        value = str(var_dir()) if name == "KERNEL_VAR_DIR" else masked_url(settings.database_url)
        problem = exc.message.removeprefix(f"{exc.field}: ")
        raise ConfigInvalid(name, value, "", problem=problem) from None


def refuse_start(process: str, exc: KernelError) -> NoReturn:
    """End a worker or Beat that cannot start: one line on stderr, exit 2 for configuration."""
    sys.stderr.write(f"celery-kernel {process} cannot start: Error {exc.code}: {exc.message}\n")
    sys.stderr.flush()
    raise SystemExit(CONFIG_EXIT if isinstance(exc, ConfigInvalid) else 1)
