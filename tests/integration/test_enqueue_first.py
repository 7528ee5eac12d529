"""The documented transactional enqueue as a fresh process makes it (issue 39 item 6): on
SQLite the application writes, then enqueues on its connection, and the process's first
enqueue opens the kernel. Opening must not wait for the write lock the caller's own
transaction holds (it answered STORAGE_UNAVAILABLE, SQLITE_BUSY)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from kernel.store import Kernel

CLIENT = """\
import json, sqlalchemy as sa
from celery import Celery
from celery_app import enqueue, install
from celery_app.settings import KernelSettings

app = install(Celery("shop"))

@app.task(name="shop.send_invoice")
def send_invoice(order):
    return order

engine = sa.create_engine(KernelSettings.from_app(app).database_url)
with engine.begin() as conn:
    conn.execute(sa.text("INSERT INTO orders (id) VALUES (7)"))
    made = enqueue(app, "shop.send_invoice", [7], key="order-7", connection=conn)
print(json.dumps({"id": made.occurrence_id}))
"""


def test_the_first_enqueue_of_a_process_joins_the_callers_write(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    Kernel.open(url, migrate_schema=True).close()  # migrated, as a worker leaves it
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE orders (id INTEGER PRIMARY KEY)"))
    env = {**os.environ, "KERNEL_DATABASE_URL": url}
    for name in ("CELERY_BROKER_URL", "CELERY_CONFIG_MODULE", "KERNEL_JOBS_FILE"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", CLIENT], cwd=tmp_path, env=env,
                          timeout=120, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout.splitlines()[-1])["id"]

    kernel = Kernel.open(url)
    try:
        occurrence = kernel.get_occurrence(made)
        assert (occurrence.job_id, occurrence.trigger_key) == (
            "task:shop.send_invoice",
            "key:order-7",
        )
    finally:
        kernel.close()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT id FROM orders")).scalars().all() == [7]
    engine.dispose()
