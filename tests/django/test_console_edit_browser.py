"""Edit and retry in a real browser (Debian's Chromium driven by Playwright):
the form, the diff, the confirmed edit, a worker running the job with the
new arguments, and the job's History page naming the operator.  Skips
without Chromium outside CI, like ``test_console_browser``."""

from __future__ import annotations

import threading

import pytest

from awa_django import ops
from tests.conftest import run_burst
from tests.django.test_console_browser import browser_page, shot
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["browser_page"]  # the fixture, used by name


def test_operator_edits_a_failed_job_and_sees_it_complete(browser_page, queue):
    page, base = browser_page
    job = JobFactory.create(kind="testapp.charge", queue=queue, args_json="[0]", state="failed")

    page.goto(f"{base}/admin/awa_django/job/{job.id}/change/")
    page.click("a.awa-action-edit")
    page.wait_for_selector("#awa-edit-args")
    page.fill("#awa-edit-args", "[7")  # a typo first
    page.click(".awa-edit input[type=submit]")
    assert "args is not valid JSON" in page.inner_text(".awa-edit-error")
    page.fill("#awa-edit-args", "[7]")
    page.fill("#awa-edit-kwargs", '{"amount": 3}')
    page.click(".awa-edit input[type=submit]")
    page.wait_for_selector(".awa-diff")
    added = page.locator(".awa-diff-add").all_inner_texts()
    assert "+  7" in added and '+  "amount": 3' in added
    shot(page, "console-edit-and-retry")
    page.click(".awa-confirm input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "queued again with the edited arguments" in page.inner_text(".messagelist")
    assert ops.get_job(job.id).state == "available"

    worker = threading.Thread(target=run_burst, args=(queue,))
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive()
    page.reload()
    assert page.inner_text(".awa-job .awa-state") == "completed"
    assert "charged customer 7 3" in page.inner_text(".awa-job")
    assert "awa_django.edited" in page.inner_text(".awa-errors")

    page.click("a.historylink")
    page.wait_for_selector("#change-history")
    history = page.inner_text("#change-history")
    assert "operator" in history and "Edit and retry: args [0] -> [7]" in history
