"""The console's pages over a real ``kernel web``: what an action needs before it is
offered, the footer, the events page, live updates, the run timeline, charts, the
definition's revisions, Swagger UI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from web.support import Web, console_login


@pytest.fixture(scope="module")
def operator(web: Web) -> Iterator[httpx.Client]:
    client = console_login(web.url, "operator", web.tokens["operator"])
    try:
        yield client
    finally:
        client.close()


def _running(web: Web, **fields: object) -> int:
    job = web.fresh_job(**fields)
    occ = web.kernel.run_now(job, request_id=f"{job}-r", operator="t").occurrence.id
    assert web.kernel.claim(occ, owner="w1", lease=600) is not None
    return occ


def test_pause_is_offered_only_when_the_adapter_can_pause(web: Web, operator: httpx.Client) -> None:
    shell = _running(web, kind="shell", payload={"argv": ["true"]})
    page = operator.get(f"/occurrences/{shell}").text
    assert f'href="/occurrences/{shell}/pause"' not in page
    assert 'id="no-pause"' in page and "declares no safe point" in page
    assert f'href="/occurrences/{shell}/cancel"' in page
    checkpointing = _running(web)  # callable: checkpoint_v1
    page = operator.get(f"/occurrences/{checkpointing}").text
    assert f'href="/occurrences/{checkpointing}/pause"' in page
    assert 'id="no-pause"' not in page


def test_the_footer_names_the_kernels_absolute_database(web: Web, operator: httpx.Client) -> None:
    page = operator.get("/jobs").text
    database = web.users_file.parent / "kernel.db"
    assert f'<code id="database">sqlite:///{database}</code>' in page
    assert Path(str(database)).is_absolute()
    assert 'id="database"' not in httpx.get(f"{web.url}/login").text
