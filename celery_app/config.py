"""Starting from the settings: the embedded broker's folders and the kernel every process opens.

The settings themselves are read and checked in :mod:`celery_app.settings`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from celery_app.hints import made_runs_publisher
from celery_app.project_paths import var_dir
from celery_app.setting_values import ConfigInvalid
from celery_app.settings import CONFIG_EXIT, KernelSettings
from celery_app.shell import celery_command
from kernel import (
    MIGRATE_COMMAND,
    InvalidArgument,
    Kernel,
    KernelError,
    SchemaUnknown,
    create_kernel_engine,
    make_private_dir,
    masked_url,
)

__all__ = [
    "check_broker_url",
    "embedded_broker_options",
    "ensure_broker_folders",
    "kernel_engine",
    "kernel_engine_options",
    "open_kernel",
    "refuse_start",
]

T = TypeVar("T")


def embedded_broker_options(app: Any = None) -> dict[str, Any]:
    """kombu ``filesystem://`` folders: a serverless broker shared by the processes of one host."""
    broker = var_dir(app) / "broker"
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
    defaults = embedded_broker_options(app)
    for key in ("data_folder_in", "data_folder_out", "control_folder"):
        folder = options.get(key)
        if not folder:
            continue
        try:
            make_private_dir(Path(folder))
            writable = os.access(folder, os.W_OK | os.X_OK)
        except (OSError, ValueError) as exc:
            writable, reason = False, getattr(exc, "strerror", None) or str(exc)
        else:
            reason = "not writable"
        if not writable:
            name, value = (
                ("KERNEL_VAR_DIR", str(var_dir(app)))
                if folder == defaults[key]
                else (f"broker_transport_options[{key!r}]", folder)
            )
            raise ConfigInvalid(
                name, value, "a folder this process can write", problem=f"{folder}: {reason}"
            )


def check_broker_url(app: Any) -> None:
    """Refuse a broker URL kombu cannot parse or has no transport for, before Celery builds
    its banner or connection from it and fails with a traceback.

    Raises:
        ConfigInvalid: naming ``CELERY_BROKER_URL`` (or ``broker_url``), password masked.
    """
    try:
        with app.connection_for_write() as conn:
            conn.get_transport_cls()
    except (ValueError, KeyError, ImportError, TypeError) as exc:
        name = "CELERY_BROKER_URL" if os.environ.get("CELERY_BROKER_URL") else "broker_url"
        reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise ConfigInvalid(
            name,
            str(app.conf.broker_url),
            "",
            problem=f"not a usable broker URL ({masked_url(str(reason))}); e.g. "
            "redis://host:6379/0, amqp://user@host//, or unset for the embedded broker",
        ) from None


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
    try:
        return _configured(
            settings,
            lambda: Kernel.open(
                settings.database_url,
                migrate_schema=migrating,
                on_runs_made=made_runs_publisher(
                    app, batch_max=settings.batch_max, rehint_after=settings.rehint_after
                ),
                **kernel_engine_options(settings, must_exist=not migrating),
            ),
        )
    except SchemaUnknown as exc:  # the migrate command of this app, as it runs from here
        message = exc.message.replace(MIGRATE_COMMAND, celery_command(app, "kernel", "migrate"))
        raise SchemaUnknown(message, **exc.details) from None


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
        value = str(var_dir()) if name == "KERNEL_VAR_DIR" else settings.database_url
        problem = exc.message.removeprefix(f"{exc.field}: ")
        raise ConfigInvalid(name, value, "", problem=problem) from None


def refuse_start(process: str, exc: KernelError, *, exit_code: int | None = None) -> NoReturn:
    """End a worker or Beat that cannot start: one line on stderr (the CLI's words), exit
    ``exit_code``, else 2 for configuration and 1 otherwise."""
    sys.stderr.write(f"celery-kernel {process} cannot start: Error {exc.code}: {exc.message}\n")
    sys.stderr.flush()
    if exit_code is None:
        exit_code = CONFIG_EXIT if isinstance(exc, ConfigInvalid) else 1
    raise SystemExit(exit_code)
