"""compose.yaml: the services, health checks and signal handling the README promises.

No Docker engine runs here, so this reads the file as Compose would and checks its shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parent.parent / "compose.yaml"


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def test_every_service_is_there_with_a_health_check() -> None:
    services = _services()
    assert set(services) == {
        "redis",
        "postgres",
        "migrate",
        "worker-1",
        "worker-2",
        "beat-1",
        "beat-2",
        "flower",
    }
    for name, service in services.items():
        if name != "migrate":
            assert service["healthcheck"]["test"], name


def test_celery_services_wait_for_healthy_stores_and_the_migration() -> None:
    services = _services()
    for name in ("worker-1", "worker-2", "beat-1", "beat-2"):
        needs = services[name]["depends_on"]
        assert needs["redis"]["condition"] == "service_healthy", name
        assert needs["postgres"]["condition"] == "service_healthy", name
        assert needs["migrate"]["condition"] == "service_completed_successfully", name
        env = services[name]["environment"]
        assert env["CELERY_BROKER_URL"].startswith("redis://")
        assert env["KERNEL_DATABASE_URL"].startswith("postgresql+psycopg://")


def test_sigterm_reaches_the_celery_main_process_only() -> None:
    # Exec-form commands make Celery the child of tini (init: true), which forwards
    # SIGTERM to it alone; Celery then warm-shuts down its own pool.
    for name, service in _services().items():
        command = service.get("command")
        if command and command[0] == "celery":
            assert isinstance(command, list), name
            assert service["init"] is True and service["stop_signal"] == "SIGTERM", name
