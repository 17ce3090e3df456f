"""Django admin's extension points on the console: actions, filters, a project's own page."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory
from django.urls import reverse

from awa_django import ops
from awa_django.admin import DeadLetterAdmin, JobAdmin
from awa_django.admin.actions import Selection
from awa_django.admin.filters import StateFilter
from awa_django.models import DeadLetter, Job
from docs.examples.console_actions import ProjectJobAdmin, cancel_as_spam
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def request_as(user) -> object:
    request = RequestFactory().get("/admin/awa_django/job/")
    request.user = user
    return request


@pytest.fixture
def root(superuser):
    """The user the ``superuser`` client is signed in as."""
    from django.contrib.auth.models import User

    return User.objects.get(username="root")


def test_each_page_lists_its_actions_and_filters(root):
    request = request_as(root)
    jobs = admin.site._registry[Job]
    dlq = DeadLetterAdmin(DeadLetter, admin.site)
    assert list(jobs.get_actions(request)) == [
        "retry",
        "cancel",
        "move_to_dlq",
        "dlq_retry",
        "dlq_purge",
    ]
    names = [f.parameter_name for f in jobs.get_list_filter(request)]
    assert names == ["state", "queue", "priority", "kind", "tag"]
    assert [f.parameter_name for f in dlq.get_list_filter(request)] == ["queue", "kind"]
    assert jobs.get_search_fields(request) == ("=id", "kind")


def test_a_site_wide_action_reaches_the_lists_with_the_selection(root, superuser, queue):
    received: list[object] = []

    def note(modeladmin, request, queryset):
        received.extend(queryset)

    note.allowed_permissions = ("operate",)
    admin.site.add_action(note, "note_selection")
    try:
        assert "note_selection" in admin.site._registry[Job].get_actions(request_as(root))
        jobs = [JobFactory.create(queue=queue) for _ in range(2)]
        form = {"action": "note_selection", "_selected_action": [j.id for j in jobs]}
        response = superuser.post(reverse("admin:awa_django_job_changelist"), form)
        assert response.status_code == 302
        assert sorted(info.id for info in received) == sorted(j.id for j in jobs)
        assert {info.queue for info in received} == {queue}  # rows: JobInfo records
    finally:
        admin.site.disable_action("note_selection")


def test_a_project_page_adds_an_action_that_runs_on_the_selection(
    project_job_admin, superuser, queue
):
    assert isinstance(project_job_admin, ProjectJobAdmin)
    spam, keep = JobFactory.create(queue=queue), JobFactory.create(queue=queue)
    page = superuser.get(reverse("admin:awa_django_job_changelist") + f"?queue={queue}")
    assert 'value="cancel_as_spam"' in page.content.decode()
    form = {"action": "cancel_as_spam", "_selected_action": [spam.id]}
    response = superuser.post(reverse("admin:awa_django_job_changelist") + f"?queue={queue}", form)
    assert response.status_code == 302
    info = ops.get_job(spam.id)
    assert info.state == "cancelled" and info.errors[-1]["message"] == "spam"
    assert ops.get_job(keep.id).state == "available"
    (logged,) = LogEntry.objects.filter(object_id=str(spam.id))
    assert (logged.user.username, logged.change_message) == ("root", "Cancelled as spam")
    (entry,) = ops.audit_log(job_id=spam.id)
    assert (entry.actor, entry.action, entry.detail["reason"]) == ("root", "cancel_job", "spam")


def test_a_project_action_needs_its_permission_and_a_writable_console(
    project_job_admin, queue, settings
):
    from tests.django.conftest import console_user

    job = JobFactory.create(queue=queue)
    viewer = console_user("viewer", "view_job")
    form = {"action": cancel_as_spam.__name__, "_selected_action": [job.id]}
    assert viewer.post(reverse("admin:awa_django_job_changelist"), form).status_code == 403
    operator = console_user("operator", "view_job", "change_job")
    settings.AWA = {**getattr(settings, "AWA", {}), "ADMIN_READ_ONLY": True}
    assert operator.post(reverse("admin:awa_django_job_changelist"), form).status_code == 403
    assert ops.get_job(job.id).state == "available"


def test_the_selection_is_queryset_like(queue):
    jobs = [JobFactory.create(queue=queue) for _ in range(2)]
    page = admin.site._registry[Job]
    picked = Selection(page).filter(pk__in=[str(jobs[1].id), "x", str(jobs[0].id), "-1"])
    assert picked.values_list("pk", flat=True) == sorted(j.id for j in jobs)
    assert picked.count() == len(picked) == 2 and picked.exists()
    assert [info.id for info in picked] == sorted(j.id for j in jobs)
    with pytest.raises(TypeError):
        picked.filter(kind="x")


def test_the_selection_orders_ids_as_numbers():
    """Job 99 before job 100 (the keys used to be sorted as text)."""
    page = admin.site._registry[Job]
    picked = Selection(page).filter(pk__in=["100", "99", "9", "1000"])
    assert picked.values_list("pk", flat=True) == [9, 99, 100, 1000]


def test_a_subclass_reshapes_the_sidebar_and_an_unknown_filter_is_refused(root):
    class StatesOnly(JobAdmin):
        list_filter = (StateFilter,)

    class Misnamed(StateFilter):
        parameter_name = "colour"

    class Broken(JobAdmin):
        list_filter = (Misnamed,)

    request = request_as(root)
    page = StatesOnly(Job, admin.site)
    sections = page.sidebar(request, lambda **changes: "?", {})
    assert [s["parameter"] for s in sections] == ["state"]
    with pytest.raises(ImproperlyConfigured, match="colour"):
        Broken(Job, admin.site).sidebar(request, lambda **changes: "?", {})
