"""Starting from the settings: the embedded broker's folders and the kernel every process opens.

The settings themselves are read and checked in :mod:`celery_app.settings`; they are
importable from here too, as before.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from celery_app.settings import CONFIG_EXIT, ConfigInvalid, KernelSettings, var_dir
from kernel import InvalidArgument, Kernel, KernelError
from kernel.engine import create_kernel_engine, make_private_dir
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

T = TypeVar("T")


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
            make_private_dir(Path(folder))
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
