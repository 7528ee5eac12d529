"""celery-kernel's settings: one object from ``app.conf`` and the environment, checked at start."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel import InvalidArgument, Kernel

__all__ = [
    "KernelSettings",
    "var_dir",
    "embedded_broker_options",
    "ensure_broker_folders",
    "open_kernel",
]


def var_dir() -> Path:
    """Where the embedded defaults keep their files: ``KERNEL_VAR_DIR``, else ``./var``."""
    return Path(os.environ.get("KERNEL_VAR_DIR") or "var")


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
    """

    database_url: str
    jobs_file: str | None
    sqlite_synchronous: str
    auto_migrate: bool
    beat_interval: float
    dispatch_batch: int
    rehint_after: float

    @classmethod
    def from_app(cls, app: Any) -> KernelSettings:
        conf = app.conf

        def pick(env: str, key: str, default: Any) -> Any:
            value = os.environ.get(env)
            return value if value not in (None, "") else conf.get(key, default)

        settings = cls(
            database_url=str(
                pick(
                    "KERNEL_DATABASE_URL",
                    "kernel_database_url",
                    f"sqlite:///{var_dir() / 'kernel.db'}",
                )
            ),
            jobs_file=pick("KERNEL_JOBS_FILE", "kernel_jobs_file", None),
            sqlite_synchronous=str(
                pick("KERNEL_SQLITE_SYNCHRONOUS", "kernel_sqlite_synchronous", "FULL")
            ).upper(),
            auto_migrate=_flag(pick("KERNEL_AUTO_MIGRATE", "kernel_auto_migrate", True)),
            beat_interval=float(pick("KERNEL_BEAT_INTERVAL", "kernel_beat_interval", 1.0)),
            dispatch_batch=int(conf.get("kernel_dispatch_batch", 500)),
            rehint_after=float(conf.get("kernel_rehint_after", 30.0)),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse settings that cannot work, naming the setting."""
        if self.sqlite_synchronous not in ("FULL", "NORMAL"):
            raise InvalidArgument("kernel_sqlite_synchronous", "must be FULL or NORMAL")
        if not 0.05 <= self.beat_interval <= 300:
            raise InvalidArgument("kernel_beat_interval", "must be between 0.05 and 300 seconds")
        if not 1 <= self.dispatch_batch <= 10_000:
            raise InvalidArgument("kernel_dispatch_batch", "must be between 1 and 10000")
        if self.rehint_after <= 0:
            raise InvalidArgument("kernel_rehint_after", "must be positive")
        if self.jobs_file is not None and not Path(self.jobs_file).is_file():
            raise InvalidArgument("KERNEL_JOBS_FILE", f"no such file: {self.jobs_file}")


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def embedded_broker_options() -> dict[str, Any]:
    """kombu ``filesystem://`` folders: a serverless broker shared by the processes of one host."""
    broker = var_dir().resolve() / "broker"
    return {
        "data_folder_in": str(broker / "queue"),
        "data_folder_out": str(broker / "queue"),
        "control_folder": str(broker / "control"),
        "store_processed": False,
    }


def ensure_broker_folders(app: Any) -> None:
    """Create the embedded broker's folders; only processes that use the broker call this."""
    options = app.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "control_folder"):
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)


def open_kernel(app: Any, *, migrate: bool | None = None) -> Kernel:
    """Open the kernel the app is configured for (schema migrated when ``auto_migrate``)."""
    settings = KernelSettings.from_app(app)
    return Kernel.open(
        settings.database_url,
        migrate_schema=settings.auto_migrate if migrate is None else migrate,
        sqlite_synchronous=settings.sqlite_synchronous,
    )
