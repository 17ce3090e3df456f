"""Encrypted jobs in the console: sealed for every user, decrypted on request
for those holding ``view_job_arguments``, each decrypted view audited.

The jobs are real: enqueued through ``@job(encrypt=True)`` and run by an
in-process worker, so the page shows what a worker stored (a sealed return
value, sealed progress and a sealed error message).  The browser test drives
Debian's Chromium through Playwright (skipped without it outside CI, like
the other console browser tests).
"""

from __future__ import annotations

import threading
import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connections
from django.urls import reverse
from testapp import jobs

from awa_django import ops
from awa_django.domain import sealing
from tests.conftest import run_burst
from tests.django.conftest import console_user
from tests.django.test_console_browser import browser_page, shot

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["browser_page"]  # the fixture, used by name


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def secret() -> str:
    return f"carol+{uuid.uuid4().hex}@example.org"


def finished(queue: str, secret: str) -> tuple[int, int]:
    """A completed and a dead-lettered encrypted job, both carrying ``secret``."""
    done = jobs.sealed.using(queue=queue).enqueue(secret)
    dead = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret, fail=True)
    run_burst(queue)
    assert ops.move_failed_to_dlq(dead.id)
    return done.id, dead.id


def page(job_id: int) -> str:
    return reverse("admin:awa_django_job_change", args=[job_id])


def decrypt(job_id: int) -> str:
    return reverse("admin:awa_django_job_decrypt", args=[job_id])


def audited_reads(job_id: int) -> list[tuple[str, str]]:
    return [
        (entry.actor, entry.outcome)
        for entry in ops.audit_log(limit=100)
        if entry.action == "view_job_arguments" and entry.job_ids == [job_id]
    ]


def test_without_the_permission_the_page_shows_it_sealed(queue, secret):
    done, dead = finished(queue, secret)
    client = console_user("viewer", "view_job", "view_deadletter")
    for job_id in (done, dead):
        html = client.get(page(job_id)).content.decode()
        assert secret not in html and "could not deliver" not in html
        assert "This job is encrypted" in html
        assert sealing.key_id(sealing.key_bytes(_key())) in html
        assert "Show decrypted" not in html and "awa-action-edit" not in html
    assert "(encrypted)" in client.get(page(dead)).content.decode()
    dlq = client.get(reverse("admin:awa_django_deadletter_changelist")).content.decode()
    assert secret not in dlq and "(encrypted)" in dlq
    # The endpoint refuses it too, and writes nothing.
    assert client.post(decrypt(done)).status_code == 403
    assert audited_reads(done) == []
    # Edit and retry is not offered, and its form refuses an encrypted job.
    editor = console_user("editor", "view_job", "change_job", "change_deadletter")
    edit = reverse("admin:awa_django_job_edit", args=[dead])
    for response in (editor.get(edit), editor.post(edit, {"args": "[]", "kwargs": "{}"})):
        assert response.status_code == 302 and response.url == page(dead)
    assert ops.get_job(dead).state == "dlq"


def test_with_the_permission_each_decrypted_view_is_an_audited_read(queue, secret):
    done, dead = finished(queue, secret)
    client = console_user("auditor", "view_job", "view_job_arguments")
    html = client.get(page(done)).content.decode()
    assert secret not in html and "Show decrypted" in html  # sealed until asked
    assert client.get(decrypt(done)).status_code == 403  # a read that audits is a POST
    opened = client.post(decrypt(done)).content.decode()
    assert secret in opened and "shown decrypted for you" in opened
    assert "echo" in opened  # the return value, opened
    opened = client.post(decrypt(dead)).content.decode()
    assert f"could not deliver to {secret}" in opened
    assert audited_reads(done) == [("auditor", "ok")]
    assert audited_reads(dead) == [("auditor", "ok")]
    assert secret not in client.get(page(done)).content.decode()  # sealed again


def test_argument_search_of_an_encrypted_kind_is_refused_with_a_reason(queue, secret):
    jobs.sealed.using(queue=queue).enqueue(secret)
    client = console_user("viewer", "view_job")
    url = reverse("admin:awa_django_job_changelist")
    html = client.get(url, {"kind": "testapp.sealed", "args": f'["{secret}"]'}).content.decode()
    assert "are encrypted" in html and "cannot match them" in html


def test_a_user_may_be_given_the_permission_like_any_other():
    permission = Permission.objects.get(codename="view_job_arguments")
    assert permission.name == "Can see the decrypted arguments of encrypted jobs"
    user = User.objects.create_user("someone")
    user.user_permissions.add(permission)
    assert User.objects.get(pk=user.pk).has_perm("awa_django.view_job_arguments")


def test_in_a_browser_the_operator_decrypts_and_a_viewer_cannot(browser_page, queue, secret):
    page_, base = browser_page
    made: list[tuple[int, int]] = []

    def make() -> None:  # on another thread: Playwright holds an event loop on this one
        try:
            made.append(finished(queue, secret))
        finally:
            connections.close_all()  # that thread's: the test database is dropped after

    worker = threading.Thread(target=make)
    worker.start()
    worker.join(timeout=120)
    [(done, _)] = made
    page_.goto(f"{base}{page(done)}")
    assert "This job is encrypted" in page_.inner_text(".awa-job")
    assert secret not in page_.content()
    page_.click("button.awa-action-decrypt")
    page_.wait_for_selector(".awa-decrypted")
    assert secret in page_.inner_text(".awa-job")
    shot(page_, "console-encrypted-job-decrypted")
    page_.goto(f"{base}{page(done)}")  # the page itself: sealed again
    assert secret not in page_.content()

    viewer = User.objects.create_user("viewer", password="a-long-password", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    page_.context.clear_cookies()
    page_.goto(f"{base}/admin/login/?next={page(done)}")
    page_.fill("#id_username", "viewer")
    page_.fill("#id_password", "a-long-password")
    page_.click("input[type=submit]")
    page_.wait_for_selector(".awa-sealed")
    assert page_.locator("button.awa-action-decrypt").count() == 0
    assert secret not in page_.content()
    shot(page_, "console-encrypted-job-sealed")
    assert audited_reads(done) == [("operator", "ok")]


def _key() -> str:
    from django.conf import settings

    return settings.AWA["ENCRYPTION_KEYS"][0]
