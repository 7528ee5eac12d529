"""``POST /api/enqueue`` (issue 27): the operator role enqueues a task's run, a viewer may not."""

from __future__ import annotations

from pathlib import Path

from web.support import serve

TASKS = """\
from celery_app import app

@app.task(name="shop.send_invoice")
def send_invoice(order_id):
    return order_id
"""


def test_an_operator_enqueues_and_a_viewer_is_forbidden(tmp_path: Path) -> None:
    (tmp_path / "enqueue_web_tasks.py").write_text(TASKS)
    (tmp_path / "enqueue_web_settings.py").write_text('imports = ["enqueue_web_tasks"]\n')
    with serve(tmp_path, CELERY_CONFIG_MODULE="enqueue_web_settings") as web:
        body = {"task": "shop.send_invoice", "args": [7], "key": "order-7"}
        with web.api(web.tokens["viewer"]) as viewer:
            forbidden = viewer.post("/api/enqueue", json=body)
        assert forbidden.status_code == 403 and web.kernel.list_occurrences(limit=5) == []
        with web.api(web.tokens["operator"]) as operator:
            made = operator.post("/api/enqueue", json=body)
            again = operator.post("/api/enqueue", json=body)
            unknown = operator.post("/api/enqueue", json={"task": "shop.send_invoic"})
            bad = operator.post("/api/enqueue", json={**body, "args": [1], "priority": 999})
        assert made.status_code == 200, made.text
        assert made.json()["deduplicated"] is False and again.json()["deduplicated"] is True
        occurrence = made.json()["occurrence"]
        assert occurrence["job_id"] == "task:shop.send_invoice"
        assert again.json()["occurrence"]["id"] == occurrence["id"]
        assert unknown.status_code == 404
        assert "shop.send_invoice" in unknown.json()["error"]["message"]
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "INVALID_ARGUMENT"
        assert len(web.kernel.list_occurrences(limit=5)) == 1
