"""Enqueue inside a real Django ``transaction.atomic()`` on PostgreSQL (issue 27): the
occurrence exists exactly when the block commits, and its hint is published by Django's
``on_commit`` right after the commit (none for a rolled-back block)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy.engine import make_url

from celery_app import enqueue, install
from kernel import Kernel

django = pytest.importorskip("django")


class Rollback(Exception):
    pass


def _messages(var_dir: Path) -> int:
    queue = var_dir / "broker" / "queue"
    return len(list(queue.glob("*.msg"))) if queue.exists() else 0


def test_a_django_atomic_block_commits_the_occurrence_and_then_hints_it(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.conf import settings
    from django.db import connection, transaction

    url = make_url(pg_database_url)
    if not settings.configured:
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": url.database,
                    "USER": url.username,
                    "PASSWORD": url.password or "",
                    "HOST": url.host,
                    "PORT": str(url.port),
                }
            },
        )
        django.setup()
    monkeypatch.setenv("KERNEL_VAR_DIR", str(tmp_path / "var"))
    app = install(Celery("django_shop"))
    app.conf.kernel_database_url = pg_database_url

    @app.task(name="shop.django_invoice")
    def send_invoice(order_id: int) -> int:
        return order_id

    kernel = Kernel.open(pg_database_url, migrate_schema=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
        with pytest.raises(Rollback), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO orders VALUES (1)")
            enqueue(app, "shop.django_invoice", [1], key="invoice-1", connection=connection)
            raise Rollback
        assert kernel.list_occurrences(limit=5) == [] and _messages(tmp_path / "var") == 0

        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO orders VALUES (2)")
            made: Any = enqueue(
                app, "shop.django_invoice", [2], key="invoice-2", connection=connection
            )
            assert kernel.list_occurrences(limit=5) == []  # not committed yet
            assert _messages(tmp_path / "var") == 0  # nor hinted
        occurrence = kernel.get_occurrence(made.occurrence_id)
        assert occurrence.payload["args"] == [2] and occurrence.dispatched_at is not None
        assert _messages(tmp_path / "var") == 1  # on_commit published it
        with pytest.raises(Exception, match="transaction.atomic"):
            enqueue(app, "shop.django_invoice", [3], connection=connection)
    finally:
        connection.close()
        kernel.close()
        client = getattr(app, "_kernel_enqueue_client", None)
        if client is not None:
            client.kernel.close()
