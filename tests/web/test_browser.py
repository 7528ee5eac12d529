"""The console in a real browser (Debian's Chromium, driven by Playwright) over real workers.

An operator logs in, starts a checkpointing job with run-now, pauses it while it
runs, sees it paused with its checkpoint, resumes it and watches it succeed (the
pages follow the event stream: nothing is reloaded by hand); a viewer sees no action
buttons, and forged posts are refused. One browser session takes the screenshots of
every page that ``docs/console.md`` shows, into ``docs/screenshots/``. A page whose live
refresh fails fetches itself again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.stack import Stack
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright
from servers import unavailable
from web.support import make_users, serve, start_web, stop

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STEPS = 60
STEP_S = 0.25
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        unavailable(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    made = Stack(tmp_path, broker_url=None, database_url=None)
    try:
        yield made
    finally:
        made.close()


def _log_in(browser: Browser, base: str, user: str, token: str) -> Page:
    page = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{base}/")
    expect(page).to_have_url(f"{base}/login?next=/")
    page.fill("input[name=name]", user)
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Overview")
    return page


def _confirm(page: Page, action: str) -> None:
    """Click an action's button, check the confirmation step, confirm, see the result."""
    page.click(f"a.button:text-is('{action}')")
    expect(page.locator("h1")).to_contain_text(f"Confirm: {action}")
    page.click(f"button:has-text('Confirm {action}')")
    expect(page.locator("h1")).to_have_text(f"{action}: done")


def _shot(page: Page, name: str) -> None:
    """A screenshot for docs/console.md: the window's size, not the whole page (small)."""
    page.screenshot(path=SCREENSHOTS / f"{name}.png", animations="disabled")


def test_operator_pauses_and_resumes_a_running_occurrence(
    browser: Browser, stack: Stack, tmp_path: Path
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    users_file = tmp_path / "users.json"
    stack.env["KERNEL_USERS_FILE"] = str(users_file)
    tokens = make_users(users_file)
    hold = tmp_path / "hold"  # the run cannot end before it is paused, however slow the pages
    hold.touch()
    shell = {
        "id": "sync-inventory",
        "kind": "shell",
        "queue": stack.queue,
        "schedule": {"every": "4s"},
        "payload": {"argv": ["false"]},
        "max_attempts": 1,
    }
    stack.use_jobs(
        stack.job("steps", "steps", kwargs={"total": STEPS, "step_s": STEP_S, "hold": str(hold)},
                  lease="5s"),
        stack.job("tick", "record", schedule={"every": "2s"}),
        shell,
    )  # fmt: skip
    stack.start_worker("worker", concurrency=2)
    stack.start_beat("beat")
    web, base = start_web("web", stack.root, stack.env)
    stack.procs.append(web)

    page = _log_in(browser, base, "operator", tokens["operator"])
    watcher = _log_in(browser, base, "viewer", tokens["viewer"])
    watcher.goto(f"{base}/events?type=occurrence_resumed")
    expect(watcher.locator("#events")).to_contain_text("No events match.")
    page.goto(f"{base}/jobs")
    expect(page.locator("td", has_text="steps").first).to_be_visible()
    _confirm(page, "run-now")
    page.click("a.button:text-is('Continue')")
    expect(page.locator("h1")).to_contain_text("running")  # live: its stream refreshed it
    occ_id = int(page.url.rsplit("/", 1)[1])
    stack.wait(lambda: len(stack.ledger(occurrence_id=occ_id)) >= 2, timeout=20, what="two steps")
    page.goto(f"{base}/occurrences?status=running")
    expect(page.locator(f"a[href='/occurrences/{occ_id}']")).to_be_visible()
    _shot(page, "occurrences")
    page.click(f"a[href='/occurrences/{occ_id}']")

    _confirm(page, "pause")
    expect(page.locator("p.ok")).to_contain_text("pause_requested")
    page.click("a.button:text-is('Continue')")
    expect(page.locator("#control")).to_contain_text("paused (revision", timeout=20_000)
    expect(page.locator("#checkpoint")).to_contain_text('"done"')
    expect(page.locator("#timeline")).to_contain_text("paused at safe point")
    handed_at = stack.occurrence(occ_id).checkpoint["done"]
    assert 2 <= handed_at < STEPS

    _confirm(page, "resume")
    expect(page.locator("p.ok")).to_contain_text("resumed")
    # The events page, open all along, shows the resume without being reloaded.
    expect(watcher.locator("#events")).to_contain_text("occurrence_resumed", timeout=10_000)
    hold.unlink()
    page.click("a.button:text-is('Continue')")
    expect(page.locator("h1")).to_contain_text("succeeded", timeout=40_000)
    expect(page.locator("#output")).to_contain_text(f'"resumed_from": {handed_at}')
    expect(page.locator("#timeline")).to_contain_text("resumed by operator")
    _shot(page, "occurrence")
    done = stack.occurrence(occ_id)
    assert (done.status.value, done.attempt, done.fence) == ("succeeded", 1, 2)
    events = stack.kernel.events(occurrence_id=occ_id, limit=1000)
    operators = {e.data.get("operator") for e in events}
    assert "operator" in operators, events

    # The shell job fails every run (max_attempts 1): dead letters, red in the charts.
    failed = stack.wait(
        lambda: next((o.id for o in stack.occurrences("sync-inventory")
                      if o.status.value == "dead_letter"), None),
        timeout=30, what="a shell run's dead letter",
    )  # fmt: skip
    page.goto(f"{base}/occurrences/{failed}")
    expect(page.locator("h1")).to_contain_text("dead_letter")
    page.goto(f"{base}/")
    expect(page.locator("#throughput rect.bar.ok").first).to_be_attached()
    expect(page.locator("#throughput rect.bar.bad").first).to_be_attached()
    _shot(page, "overview")
    page.goto(f"{base}/jobs")
    _shot(page, "jobs")
    stack.kernel.revise_job({**stack.job("tick", "record", schedule={"every": "3s"})},
                            expected_revision=1, operator="admin")  # fmt: skip
    page.goto(f"{base}/jobs/tick")
    expect(page.locator("#history rect.bar.ok").first).to_be_attached()
    expect(page.locator("#definition")).to_contain_text("callable: ledger_jobs:record")
    expect(page.locator("#diff")).to_contain_text("+  every: 3.0")
    _shot(page, "job")
    page.evaluate("document.getElementById('revisions').scrollIntoView()")
    _shot(page, "job-revisions")
    _confirm(page, "disable")
    assert not stack.kernel.get_job("tick").enabled
    page.goto(f"{base}/events")
    expect(page.locator("#events")).to_contain_text("job_disabled")
    _shot(page, "events")
    page.goto(f"{base}/docs")
    expect(page.locator(".opblock").first).to_be_visible()
    _shot(page, "api")

    # A forged post without the session's CSRF token is refused and creates nothing.
    page.goto(f"{base}/jobs")
    before = len(stack.occurrences("steps"))
    forged = page.evaluate(
        "fetch('/jobs/steps/run-now', {method: 'POST', body: new URLSearchParams()})"
        ".then(r => r.status)"
    )
    assert forged == 403

    # A viewer sees no action buttons, and a post with its own valid CSRF token is refused.
    viewer = watcher
    viewer.goto(f"{base}/occurrences/{occ_id}")
    expect(viewer.locator("h1")).to_contain_text("succeeded")
    assert viewer.locator("p.actions, a.button").count() == 0
    viewer.goto(f"{base}/jobs")
    assert viewer.locator("td.actions, a.button").count() == 0
    viewer.goto(f"{base}/jobs/steps")
    expect(viewer.locator("#definition")).to_be_visible()
    assert viewer.locator("p.actions, a.button, textarea").count() == 0
    refused = viewer.evaluate(
        "() => { const body = new URLSearchParams();"
        " body.set('csrf', document.querySelector('input[name=csrf]').value);"
        " return fetch('/jobs/steps/run-now', {method: 'POST', body})"
        ".then(r => r.status); }"
    )
    assert refused == 403
    assert len(stack.occurrences("steps")) == before

    # Readable in a narrow window: nothing wider than the viewport but the tables' scrollers.
    viewer.set_viewport_size({"width": 360, "height": 780})
    viewer.goto(f"{base}/occurrences/{occ_id}")
    assert viewer.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    _shot(viewer, "occurrence-narrow")
    # Open live streams do not hold the server's shutdown open.
    opened = "() => new Promise(r => { new EventSource('/live').onopen = () => r(true); })"
    assert viewer.evaluate(opened)
    started = time.monotonic()
    stop(web)
    assert time.monotonic() - started < 5

    names = ("overview", "jobs", "job", "job-revisions", "occurrences", "occurrence", "events",
             "api", "occurrence-narrow")  # fmt: skip
    for name in names:
        assert 10_000 < (SCREENSHOTS / f"{name}.png").stat().st_size < 400_000, name


def test_a_live_refresh_that_fails_is_fetched_again(browser: Browser, tmp_path: Path) -> None:
    """The refresh an occurrence's last event asks for fails (the network drops it): the
    page fetches itself again rather than stay as it was until some later event."""
    with serve(tmp_path) as web:  # no worker and no Beat: the test's cancel is the only event
        job = web.fresh_job()
        occ = web.kernel.run_now(job, request_id="r", operator="t").occurrence.id
        page = _log_in(browser, web.url, "viewer", web.tokens["viewer"])
        page.goto(f"{web.url}/occurrences/{occ}")
        expect(page.locator("h1")).to_contain_text("queued")
        dropped: list[str] = []

        def drop_the_first_refresh(route: Route) -> None:
            if route.request.resource_type == "fetch" and not dropped:
                dropped.append(route.request.url)
                route.abort()
            else:
                route.continue_()

        page.route(f"{web.url}/occurrences/{occ}", drop_the_first_refresh)
        web.kernel.cancel(occ, request_id="c", operator="t")
        expect(page.locator("h1")).to_contain_text("cancelled", timeout=15_000)
        assert dropped == [f"{web.url}/occurrences/{occ}"]
