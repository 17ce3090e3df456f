"""The console in a real browser: Debian's Chromium driven by Playwright.

Logs in, opens the dashboard, the job browser and the DLQ, retries a
dead-lettered job through the bulk action and its confirmation page, runs
a worker, sees the job completed on its page and the retry, with the
operator's name, on its History page, then runs a project's own admin
action (the console how-to's example page) from the job browser.  Screenshots go to
``tests/artifacts/`` (the README's come from here).  ``.ci/run`` installs
Chromium when it is missing; outside CI the test skips without it.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections

from awa_django import ops
from tests.conftest import ROOT, run_burst
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None or not _has_playwright():
        if os.environ.get("CI"):
            pytest.fail("CI needs Chromium and Playwright (.ci/run installs them)")
        pytest.skip("Chromium or Playwright is not installed")
    return path


def _has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def browser_page(live_server, monkeypatch, reset_awa):
    from playwright.sync_api import sync_playwright

    executable = chromium()
    # Playwright's sync API keeps an event loop on this thread; the ORM
    # calls the test makes between page steps are plain sync code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    User.objects.create_superuser("operator", "operator@example.com", "a-long-password")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(15_000)
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", "a-long-password")
        page.click("input[type=submit]")
        page.wait_for_selector("#content-main")
        # Screenshots without the admin's navigation sidebar.
        page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        yield page, live_server.url
        # While Playwright runs, the test's ORM calls get a connection of
        # their own (Django's connections are context-local); close it here,
        # in that context, or the test database could not be dropped.
        connections.close_all()
        browser.close()


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_operator_retries_a_dead_letter_and_sees_it_complete(
    browser_page, project_job_admin, queue
):
    page, base = browser_page
    for n in range(3):
        JobFactory.create(kind="testapp.plain", queue=queue, args_json=f"[{n}]")
    dead = f"{queue}-dlq"  # the factory fails a job on a queue of its own
    job = JobFactory.create(kind="testapp.plain", queue=dead, args_json="[41, 1]", state="failed")
    assert ops.move_failed_to_dlq(job.id)

    page.goto(f"{base}/admin/awa_django/queue/dashboard/")
    page.wait_for_selector(".awa-tiles")
    assert page.locator(".awa-tile-label", has_text="dlq").count() == 1
    shot(page, "console-dashboard")

    page.goto(f"{base}/admin/awa_django/job/?queue={queue}")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 3
    shot(page, "console-jobs")

    page.goto(f"{base}/admin/awa_django/deadletter/")
    row = page.locator("#result_list tbody tr", has_text=str(job.id))
    assert row.count() == 1
    shot(page, "console-dlq")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "dlq_retry")
    page.click("#changelist-form button[type=submit]")
    page.wait_for_selector(".awa-confirm")
    assert "Retry 1 selected dead letter?" in page.inner_text(".awa-confirm")
    page.click(".awa-confirm input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "1 dead letter retried" in page.inner_text(".messagelist")

    # A worker runs it (in a thread: Playwright keeps an event loop on this one).
    worker = threading.Thread(target=run_burst, args=(dead,))
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive()
    page.goto(f"{base}/admin/awa_django/job/{job.id}/change/")
    assert page.inner_text(".awa-job .awa-state") == "completed"
    assert "42" in page.inner_text(".awa-job")  # the return value of plain(41, 1)
    shot(page, "console-job")

    # The job's History page: the retry, by whom.
    page.click("a.historylink")
    page.wait_for_selector("#change-history")
    history = page.inner_text("#change-history")
    assert "operator" in history and "Retry from the DLQ (bulk action)" in history
    shot(page, "console-history")

    # The project's own action (docs/examples/console_actions.py) from the jobs page.
    spam = JobFactory.create(kind="testapp.plain", queue=queue, args_json="[7]")
    page.goto(f"{base}/admin/awa_django/job/?queue={queue}")
    page.check(f"input.action-select[value='{spam.id}']")
    page.select_option("select[name=action]", "cancel_as_spam")
    page.click("#changelist-form button[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "1 job(s) cancelled as spam" in page.inner_text(".messagelist")
    assert ops.get_job(spam.id).state == "cancelled"
