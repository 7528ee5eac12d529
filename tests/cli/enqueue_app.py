"""A project app for ``kernel enqueue`` tests: installed, with one task of its own."""

from __future__ import annotations

from celery import Celery

from celery_app import install

app = install(Celery("enqueue_app"))


@app.task(name="shop.send_invoice")
def send_invoice(order_id: int) -> int:
    return order_id
