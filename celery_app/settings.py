"""celery-kernel's settings: one object from ``app.conf`` and the environment, checked at start.

Every setting is read in one place and refused with
:class:`~celery_app.setting_values.ConfigInvalid`, which names the environment variable
or Celery key it came from, the value, and what is allowed. Entry points turn it into
exit code 2 (:data:`CONFIG_EXIT`) and one line. The web console's settings are in
:mod:`celery_app.web_settings`, the project and var directories in
:mod:`celery_app.project_paths`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from celery_app.project_paths import project_dir, var_dir
from celery_app.setting_values import (
    ConfigInvalid,
    SettingSource,
    age,
    flag,
    glob_patterns,
    number_between,
    optional_duration,
    optional_text,
    seconds_between,
    source_name,
    synchronous_mode,
)
from kernel import CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_S, anchored_sqlite_url

__all__ = [
    "CONFIG_EXIT",
    "INTERRUPTED_EXIT",
    "KernelSettings",
    "RETENTION_DEFAULTS",
    "unread_kernel_keys",
    "beat_source_default",
]

#: The exit code of every entry point refusing its configuration.
CONFIG_EXIT = 2
#: The exit code of every entry point stopped by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED_EXIT = 130


def beat_source_default(app: Any) -> str:
    """The job source of an app's ``beat_schedule`` unless ``kernel_beat_source`` names one:
    ``beat_schedule:<app name>``, so the Beats of two apps sharing a kernel keep their
    jobs apart."""
    main = getattr(app, "main", None)
    return f"beat_schedule:{main}"[:64] if main and main != "__main__" else "beat_schedule"


#: How long Beat keeps finished history by default, per status (``off``: forever).
RETENTION_DEFAULTS: dict[str, str] = {"succeeded": "30d", "cancelled": "30d", "skipped": "7d"}


@dataclass(frozen=True)
class KernelSettings:
    """celery-kernel's settings (Celery ``kernel_*`` keys; environment variables win).

    Attributes:
        database_url: ``KERNEL_DATABASE_URL`` / ``kernel_database_url``; default
            ``kernel.db`` under :func:`var_dir`. A relative SQLite path is made absolute
            against :func:`project_dir`.
        jobs_file: ``KERNEL_JOBS_FILE`` / ``kernel_jobs_file``: a job file Beat applies at start.
        sqlite_synchronous: ``FULL`` (default, survives power loss) or ``NORMAL`` (opt-in).
        auto_migrate: create/upgrade the schema when a worker or Beat starts.
        beat_interval: seconds between Beat ticks.
        dispatch_batch: hints published per tick at most.
        rehint_after: seconds before an unclaimed occurrence is hinted again.
        batch_max: occurrence ids one hint carries at most when a queue's backlog is deep.
        route_tasks: glob patterns of the task names whose ``.delay()`` / ``.apply_async()``
            enqueue through the kernel (celery_app/enqueue_routing.py); None: none.
        connect_timeout: seconds to connect to PostgreSQL before STORAGE_UNAVAILABLE.
        statement_timeout: seconds one PostgreSQL statement may run.
        beat_retention: seconds after its last tick before a silent Beat is forgotten.
        retention: seconds Beat keeps the history of each prunable status (``succeeded``,
            ``cancelled``, ``skipped``: ``KERNEL_RETENTION_SUCCEEDED`` ...); None keeps it.
        retention_interval: seconds between Beat's retention passes.
        retention_batch: occurrences (and jobs) one retention pass deletes at most.
        watchdog_grace: seconds a firing may be overdue, or a run past its timeout,
            before the watchdog reports it.
        allowed_kinds: glob patterns of the adapter kinds jobs may use; None: any.
        allowed_callables: glob patterns of the ``pkg.module:function`` a ``callable`` job
            (or a watchdog's function check) may call; None: any.
        default_timeout: ``KERNEL_DEFAULT_TIMEOUT`` / ``kernel_default_timeout``: seconds a
            run of a job without a ``timeout`` may take; None (``off``, the default):
            unbounded.
        beat_source: ``KERNEL_BEAT_SOURCE`` / ``kernel_beat_source``: the job source this
            Beat's ``beat_schedule`` is (default :func:`beat_source_default`). A Beat
            retires only its own source's jobs, so Beats running different schedules on
            one kernel each name their own.
        names: where each attribute came from (variable or key), for messages.
        origins: per attribute, :data:`FROM_ENV`, :data:`FROM_APP` or :data:`FROM_DEFAULT`.
        keys: per attribute, the Celery key it is read from (before any namespace).
    """

    database_url: str
    jobs_file: str | None
    sqlite_synchronous: str
    auto_migrate: bool
    beat_interval: float
    dispatch_batch: int
    rehint_after: float
    batch_max: int
    route_tasks: tuple[str, ...] | None
    connect_timeout: float
    statement_timeout: float
    beat_retention: float
    retention: dict[str, float | None]
    retention_interval: float
    retention_batch: int
    watchdog_grace: float
    allowed_kinds: tuple[str, ...] | None
    allowed_callables: tuple[str, ...] | None
    default_timeout: float | None = None
    beat_source: str = "beat_schedule"
    names: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    origins: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    keys: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_app(cls, app: Any) -> KernelSettings:
        """Read and check every setting.

        Raises:
            ConfigInvalid: a value cannot work; the message names its variable or key.
        """
        source = SettingSource(app.conf)
        read = source.read
        default_url = f"sqlite:///{var_dir(app) / 'kernel.db'}"
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
                "jobs_file", "KERNEL_JOBS_FILE", "kernel_jobs_file", None, optional_text, "a path"
            ),
            sqlite_synchronous=read(
                "sqlite_synchronous",
                "KERNEL_SQLITE_SYNCHRONOUS",
                "kernel_sqlite_synchronous",
                "FULL",
                synchronous_mode,
                "FULL or NORMAL",
            ),
            auto_migrate=read(
                "auto_migrate",
                "KERNEL_AUTO_MIGRATE",
                "kernel_auto_migrate",
                True,
                flag,
                "true or false (1/0, yes/no, on/off)",
            ),
            beat_interval=read(
                "beat_interval",
                "KERNEL_BEAT_INTERVAL",
                "kernel_beat_interval",
                1.0,
                seconds_between(0.05, 300),
                f"{seconds} from 0.05 to 300 (or a duration: 90s, 5m)",
            ),
            dispatch_batch=read(
                "dispatch_batch",
                None,
                "kernel_dispatch_batch",
                500,
                number_between(1, 10_000),
                "a whole number from 1 to 10000",
            ),
            rehint_after=read(
                "rehint_after",
                None,
                "kernel_rehint_after",
                30.0,
                seconds_between(0.01, 86_400),
                f"{seconds} from 0.01 to 86400 (or a duration: 90s, 5m)",
            ),
            batch_max=read(
                "batch_max",
                None,
                "kernel_batch_max",
                16,
                number_between(1, 1000),
                "a whole number from 1 to 1000",
            ),
            route_tasks=read(
                "route_tasks",
                "KERNEL_ROUTE_TASKS",
                "kernel_route_tasks",
                None,
                glob_patterns,
                "glob patterns of task names, comma-separated (e.g. myproj.billing.*)",
            ),
            connect_timeout=read(
                "connect_timeout",
                "KERNEL_CONNECT_TIMEOUT",
                "kernel_connect_timeout",
                CONNECT_TIMEOUT_S,
                seconds_between(1, 3600),
                f"{seconds} from 1 to 3600 (or a duration: 90s, 5m)",
            ),
            statement_timeout=read(
                "statement_timeout",
                "KERNEL_STATEMENT_TIMEOUT",
                "kernel_statement_timeout",
                STATEMENT_TIMEOUT_S,
                seconds_between(0.1, 86_400),
                f"{seconds} from 0.1 to 86400 (or a duration: 90s, 5m)",
            ),
            beat_retention=read(
                "beat_retention",
                "KERNEL_BEAT_RETENTION",
                "kernel_beat_retention",
                600.0,
                seconds_between(1, 30 * 86_400),
                f"{seconds} from 1 to 2592000 (or a duration: 90s, 5m)",
            ),
            retention={
                status: read(
                    f"retention_{status}",
                    f"KERNEL_RETENTION_{status.upper()}",
                    f"kernel_retention_{status}",
                    default,
                    age,
                    "a duration (30d, 12h, seconds) or off",
                )
                for status, default in RETENTION_DEFAULTS.items()
            },
            retention_interval=read(
                "retention_interval",
                "KERNEL_RETENTION_INTERVAL",
                "kernel_retention_interval",
                60.0,
                seconds_between(1, 86_400),
                f"{seconds} from 1 to 86400 (or a duration: 90s, 5m)",
            ),
            retention_batch=read(
                "retention_batch",
                "KERNEL_RETENTION_BATCH",
                "kernel_retention_batch",
                500,
                number_between(1, 100_000),
                "a whole number from 1 to 100000",
            ),
            watchdog_grace=read(
                "watchdog_grace",
                "KERNEL_WATCHDOG_GRACE",
                "kernel_watchdog_grace",
                60.0,
                seconds_between(1, 86_400),
                f"{seconds} from 1 to 86400 (or a duration: 90s, 5m)",
            ),
            allowed_kinds=read(
                "allowed_kinds",
                "KERNEL_ALLOWED_KINDS",
                "kernel_allowed_kinds",
                None,
                glob_patterns,
                "glob patterns of adapter kinds, comma-separated (e.g. callable,http)",
            ),
            allowed_callables=read(
                "allowed_callables",
                "KERNEL_ALLOWED_CALLABLES",
                "kernel_allowed_callables",
                None,
                glob_patterns,
                "glob patterns of pkg.module:function, comma-separated (e.g. myproj.jobs:*)",
            ),
            default_timeout=read(
                "default_timeout",
                "KERNEL_DEFAULT_TIMEOUT",
                "kernel_default_timeout",
                None,
                optional_duration,
                "a duration (30m, 1h, seconds) or off",
            ),
            beat_source=read(
                "beat_source",
                "KERNEL_BEAT_SOURCE",
                "kernel_beat_source",
                beat_source_default(app),
                source_name,
                "a name of 1 to 64 printable characters",
            ),
            names=source.names,
            origins=source.origins,
            keys=source.keys,
        )
        if settings.database_url == default_url:
            settings.names["database_url"] = "KERNEL_VAR_DIR"
            return settings
        # One kernel per deployment: a relative SQLite path means the same file from
        # any directory a worker, Beat or command starts in.
        anchored = anchored_sqlite_url(settings.database_url, project_dir(app))
        return replace(
            settings,
            database_url=anchored,
            names=settings.names,
            origins=settings.origins,
            keys=settings.keys,
        )

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


def unread_kernel_keys(conf: Any, read: set[str]) -> dict[str, str]:
    """Keys of the app's configuration that look like kernel settings but are not read,
    each with what would be read: a Django ``KERNEL_DATABASE_URL`` beside
    ``namespace="CELERY"`` is ``CELERY_KERNEL_DATABASE_URL`` to the kernel, as
    ``BROKER_URL`` is ``CELERY_BROKER_URL`` to Celery. ``read`` holds the keys the
    kernel reads (``kernel_database_url``, ...)."""
    prefix = str(getattr(conf, "prefix", None) or "")
    unread: dict[str, str] = {}
    for name in conf:
        if not isinstance(name, str):
            continue
        base = name[len(prefix) :] if prefix and name.startswith(prefix) else name
        key = base.lower()
        if not key.startswith("kernel_"):
            continue
        readable = {key, f"{prefix}{key.upper()}"} if prefix else {key}
        if key in read and name in readable:
            continue
        if key not in read:
            unread[name] = "no kernel setting has this name"
        else:
            wanted = f"{prefix}{key.upper()}" if prefix else key
            unread[name] = f"the kernel reads {wanted} (or the environment variable {key.upper()})"
    return unread
