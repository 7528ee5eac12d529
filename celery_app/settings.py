"""celery-kernel's settings: one object from ``app.conf`` and the environment, checked at start.

Every setting is read in one place and refused with :class:`ConfigInvalid`, which
names the environment variable or Celery key it came from, the value, and what is
allowed. Entry points turn it into exit code 2 (:data:`CONFIG_EXIT`) and one line.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from kernel import (
    CONNECT_TIMEOUT_S,
    MAX_DURATION_S,
    STATEMENT_TIMEOUT_S,
    InvalidArgument,
    KernelError,
    anchored_sqlite_url,
    duration,
    masked_url,
)

__all__ = [
    "CONFIG_EXIT",
    "FROM_APP",
    "FROM_DEFAULT",
    "FROM_ENV",
    "INTERRUPTED_EXIT",
    "ConfigInvalid",
    "KernelSettings",
    "RETENTION_DEFAULTS",
    "WebSettings",
    "conf_key",
    "unread_kernel_keys",
    "beat_source_default",
    "project_dir",
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
        shown = masked_url(value) if isinstance(value, str) else value  # a URL's password
        KernelError.__init__(
            self, f"{name}={shown!r}: {problem or 'expected ' + expected}", field=name, value=shown
        )
        self.field = name


#: The folders pip installs packages into: never a project's directory.
_INSTALLED = frozenset({"site-packages", "dist-packages"})


def project_dir(app: Any = None) -> Path:
    """The directory relative kernel paths are anchored at, whatever the current directory.

    It is the directory holding the module that defines the app: ``CELERY_CONFIG_MODULE``
    when set (the settings of ``celery -A celery_app``), else the module the app is named
    after (``Celery("myproj")``: the folder of ``myproj.py``, or the one holding the
    package ``myproj/``). A module installed by pip (in ``site-packages``) has no
    project folder and nothing may be written among the installed files: its directory
    is ``celery-kernel/<module>`` in the user's data folder (``$XDG_DATA_HOME``, else
    ``~/.local/share``). An app named after no module on disk falls back to the
    current directory. ``app`` defaults to Celery's current app.
    """
    if app is None:
        from celery import current_app

        app = current_app
    for name in (os.environ.get("CELERY_CONFIG_MODULE"), getattr(app, "main", None)):
        folder = _module_root(name) if name else None
        if folder is not None and _INSTALLED.isdisjoint(folder.parts):
            return folder
        if folder is not None:
            data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
            return Path(data).absolute() / "celery-kernel" / str(name).partition(".")[0]
    return Path.cwd()


def _module_root(name: str) -> Path | None:
    """The folder holding the top-level module or package of ``name``, if it is a file."""
    top = name.partition(".")[0]
    # Imported already, most often (celery imports -A and its config from the current
    # directory, which it then takes off sys.path again).
    module = sys.modules.get(top)
    if module is not None:
        origin, package = getattr(module, "__file__", None), hasattr(module, "__path__")
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):  # ValueError: a module without a spec
            spec = None
        origin = spec.origin if spec is not None and spec.has_location else None
        package = bool(spec and spec.submodule_search_locations)
    if not origin:
        return None
    path = Path(origin).absolute()
    return path.parent.parent if package else path.parent


def var_dir(app: Any = None) -> Path:
    """Where the embedded defaults keep their files: ``KERNEL_VAR_DIR``, else ``var``, in
    :func:`project_dir` when relative (absolute either way)."""
    folder = Path(os.environ.get("KERNEL_VAR_DIR") or "var")
    return folder if folder.is_absolute() else project_dir(app) / folder


#: Where a setting's value came from, as ``kernel doctor`` shows it.
FROM_ENV, FROM_APP, FROM_DEFAULT = "environment", "app configuration", "default"


def conf_key(conf: Any, key: str) -> str | None:
    """The name ``key`` has in the app's configuration, if set there: under a namespace
    (``namespace="CELERY"``) Celery finds ``CELERY_KERNEL_X`` before ``kernel_x``."""
    prefix = getattr(conf, "prefix", None)
    if prefix and conf.get(prefix + key.upper()) is not None:
        return str(prefix + key.upper())
    return key if conf.get(key) is not None else None


class _Source:
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


def _seconds(low: float, high: float) -> Callable[[Any], float]:
    """A duration setting: seconds (``60``, ``"60"``) or ``"2m"``, read as job files read
    durations."""
    read = duration(low, high)

    def convert(value: Any) -> float:
        try:
            return read(value, "")
        except InvalidArgument:
            raise ValueError(value) from None

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
    return _seconds(0.0, MAX_DURATION_S)(value)


def _optional_duration(value: Any) -> float | None:
    """A duration (``30m``, seconds), or unset / ``off`` (None)."""
    if value is None or value == "":
        return None
    return _age(value)


def _optional_text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def _source_name(value: Any) -> str:
    """A job source's name: 1 to 64 printable characters (the kernel's ``job_sources``)."""
    name = str(value).strip()
    if not 0 < len(name) <= 64 or not name.isprintable():
        raise ValueError(value)
    return name


def beat_source_default(app: Any) -> str:
    """The job source of an app's ``beat_schedule`` unless ``kernel_beat_source`` names one:
    ``beat_schedule:<app name>``, so the Beats of two apps sharing a kernel keep their
    jobs apart."""
    main = getattr(app, "main", None)
    return f"beat_schedule:{main}"[:64] if main and main != "__main__" else "beat_schedule"


def _patterns(value: Any) -> tuple[str, ...] | None:
    """Glob patterns, comma-separated or a list; unset (None) allows everything."""
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    patterns = tuple(str(name).strip() for name in names if str(name).strip())
    if not patterns:
        raise ValueError(value)
    return patterns


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
        source = _Source(app.conf)
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
                _seconds(0.05, 300),
                f"{seconds} from 0.05 to 300 (or a duration: 90s, 5m)",
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
                _seconds(0.01, 86_400),
                f"{seconds} from 0.01 to 86400 (or a duration: 90s, 5m)",
            ),
            batch_max=read(
                "batch_max",
                None,
                "kernel_batch_max",
                16,
                _integer(1, 1000),
                "a whole number from 1 to 1000",
            ),
            route_tasks=read(
                "route_tasks",
                "KERNEL_ROUTE_TASKS",
                "kernel_route_tasks",
                None,
                _patterns,
                "glob patterns of task names, comma-separated (e.g. myproj.billing.*)",
            ),
            connect_timeout=read(
                "connect_timeout",
                "KERNEL_CONNECT_TIMEOUT",
                "kernel_connect_timeout",
                CONNECT_TIMEOUT_S,
                _seconds(1, 3600),
                f"{seconds} from 1 to 3600 (or a duration: 90s, 5m)",
            ),
            statement_timeout=read(
                "statement_timeout",
                "KERNEL_STATEMENT_TIMEOUT",
                "kernel_statement_timeout",
                STATEMENT_TIMEOUT_S,
                _seconds(0.1, 86_400),
                f"{seconds} from 0.1 to 86400 (or a duration: 90s, 5m)",
            ),
            beat_retention=read(
                "beat_retention",
                "KERNEL_BEAT_RETENTION",
                "kernel_beat_retention",
                600.0,
                _seconds(1, 30 * 86_400),
                f"{seconds} from 1 to 2592000 (or a duration: 90s, 5m)",
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
                _seconds(1, 86_400),
                f"{seconds} from 1 to 86400 (or a duration: 90s, 5m)",
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
                _seconds(1, 86_400),
                f"{seconds} from 1 to 86400 (or a duration: 90s, 5m)",
            ),
            allowed_kinds=read(
                "allowed_kinds",
                "KERNEL_ALLOWED_KINDS",
                "kernel_allowed_kinds",
                None,
                _patterns,
                "glob patterns of adapter kinds, comma-separated (e.g. callable,http)",
            ),
            allowed_callables=read(
                "allowed_callables",
                "KERNEL_ALLOWED_CALLABLES",
                "kernel_allowed_callables",
                None,
                _patterns,
                "glob patterns of pkg.module:function, comma-separated (e.g. myproj.jobs:*)",
            ),
            default_timeout=read(
                "default_timeout",
                "KERNEL_DEFAULT_TIMEOUT",
                "kernel_default_timeout",
                None,
                _optional_duration,
                "a duration (30m, 1h, seconds) or off",
            ),
            beat_source=read(
                "beat_source",
                "KERNEL_BEAT_SOURCE",
                "kernel_beat_source",
                beat_source_default(app),
                _source_name,
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


def _networks(value: Any) -> tuple[str, ...]:
    listed = value.split(",") if isinstance(value, str) else list(value)
    return tuple(
        str(ipaddress.ip_network(str(item).strip())) for item in listed if str(item).strip()
    )


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


def _loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (cookies need no TLS there)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class WebSettings:
    """``kernel web``'s settings (Celery ``kernel_web_*`` keys; environment variables win).

    Attributes:
        max_body: bytes a request body may have (``KERNEL_WEB_MAX_BODY``, default 1 MiB);
            a larger one is answered 413 before it is read.
        secure_cookies: mark the console's cookies ``Secure`` (``KERNEL_WEB_SECURE_COOKIES``):
            on by default when the server binds anything but loopback, as it is then
            meant to sit behind a TLS-terminating proxy.
        sign_in_limit: failed sign-ins (bad token or login) allowed per client address, and
            per user name at it, before it must wait (``KERNEL_WEB_SIGN_IN_LIMIT``): 429.
        trusted_proxies: addresses or networks of the proxies whose ``X-Forwarded-For`` and
            ``X-Forwarded-Proto`` are believed (``KERNEL_WEB_TRUSTED_PROXIES``, comma-
            separated); none by default, so no client can pick the address it is limited by.
        header_timeout: seconds a request's headers may take to arrive, from the connection
            or its first byte (``KERNEL_WEB_HEADER_TIMEOUT``, default 10); then 408 and closed.
        body_timeout: seconds a request's body may take to arrive after its headers
            (``KERNEL_WEB_BODY_TIMEOUT``, default 30); then the connection is closed.
    """

    max_body: int
    secure_cookies: bool
    sign_in_limit: int
    trusted_proxies: tuple[str, ...] = ()
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    #: Per attribute, the Celery key it is read from.
    keys: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_app(cls, app: Any, host: str) -> WebSettings:
        """Read and check the web settings of a server bound to ``host``.

        Raises:
            ConfigInvalid: a value cannot work; the message names its variable or key.
        """
        source = _Source(app.conf)
        read = source.read
        return cls(
            max_body=read(
                "max_body",
                "KERNEL_WEB_MAX_BODY",
                "kernel_web_max_body",
                1024 * 1024,
                _integer(1024, 1024**3),
                "a number of bytes from 1024 to 1073741824",
            ),
            secure_cookies=read(
                "secure_cookies",
                "KERNEL_WEB_SECURE_COOKIES",
                "kernel_web_secure_cookies",
                not _loopback(host),
                _flag,
                "true or false (1/0, yes/no, on/off)",
            ),
            sign_in_limit=read(
                "sign_in_limit",
                "KERNEL_WEB_SIGN_IN_LIMIT",
                "kernel_web_sign_in_limit",
                20,
                _integer(1, 100_000),
                "a whole number from 1 to 100000",
            ),
            trusted_proxies=read(
                "trusted_proxies",
                "KERNEL_WEB_TRUSTED_PROXIES",
                "kernel_web_trusted_proxies",
                (),
                _networks,
                "IP addresses or networks, comma-separated (127.0.0.1, 10.0.0.0/8)",
            ),
            header_timeout=read(
                "header_timeout",
                "KERNEL_WEB_HEADER_TIMEOUT",
                "kernel_web_header_timeout",
                10.0,
                _seconds(0.5, 3600),
                "a duration from 0.5 s to 1 h",
            ),
            body_timeout=read(
                "body_timeout",
                "KERNEL_WEB_BODY_TIMEOUT",
                "kernel_web_body_timeout",
                30.0,
                _seconds(0.5, 3600),
                "a duration from 0.5 s to 1 h",
            ),
            keys=source.keys,
        )
