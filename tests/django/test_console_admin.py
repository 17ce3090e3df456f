"""The operator console in the admin: pages, permissions, actions, read-only mode."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import override_settings
from django.urls import reverse

from awa_django import ops
from awa_django.cron import CronSchedule, PeriodicJob, schedules, sync_operation
from awa_django.models import Job, ReadOnlyModelError
from awa_django.storage import SyncRunner
from tests.conftest import run_burst
from tests.django.conftest import console_user
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

MODELS = (
    "job",
    "deadletter",
    "queue",
    "queuedescriptor",
    "jobkinddescriptor",
    "runtime",
    "periodicschedule",
)


def changelist(model: str) -> str:
    return reverse(f"admin:awa_django_{model}_changelist")


def object_action(model: str, key: object, action: str) -> str:
    return reverse(f"admin:awa_django_{model}_object_action", args=[key, action])


def pages(queue: str, job_id: int) -> list[str]:
    return [
        *(changelist(m) for m in MODELS),
        reverse("admin:awa_django_job_change", args=[job_id]),
        reverse("admin:awa_django_queue_change", args=[queue]),
        reverse("admin:awa_django_queue_dashboard"),
        changelist("job") + f"?state=available&queue={queue}&priority=2",
    ]


def test_every_page_renders_for_a_superuser(superuser, queue):
    job = JobFactory.create(queue=queue)
    for url in pages(queue, job.id):
        response = superuser.get(url)
        assert response.status_code == 200, url
    index = superuser.get(reverse("admin:index")).content.decode()
    for model in MODELS:
        assert changelist(model) in index


def test_pages_are_refused_without_staff_or_permissions(queue):
    job = JobFactory.create(queue=queue)
    outsider = console_user("outsider", staff=False)
    staff = console_user("staff")
    for url in pages(queue, job.id):
        assert outsider.get(url).status_code == 302, url  # to the login page
        assert staff.get(url).status_code == 403, url


def test_view_permission_shows_pages_without_actions(queue):
    job = JobFactory.create(queue=queue)
    viewer = console_user("viewer", *(f"view_{m}" for m in MODELS))
    page = viewer.get(changelist("job") + f"?queue={queue}")
    assert page.status_code == 200
    body = page.content.decode()
    assert str(job.id) in body and "_selected_action" not in body
    response = viewer.post(object_action("job", job.id, "cancel"))
    assert response.status_code == 403
    assert ops.get_job(job.id).state == "available"


def test_job_actions_go_through_ops(superuser, queue):
    available = JobFactory.create(queue=queue)
    failed = JobFactory.create(queue=f"{queue}-f", state="failed")
    assert superuser.post(object_action("job", available.id, "cancel")).status_code == 302
    assert ops.get_job(available.id).state == "cancelled"
    assert superuser.post(object_action("job", failed.id, "dlq")).status_code == 302
    assert ops.get_job(failed.id).state == "dlq"
    assert superuser.post(object_action("job", failed.id, "dlq_retry")).status_code == 302
    assert ops.get_job(failed.id).state == "available"  # ready at once, no promotion
    assert superuser.post(object_action("job", available.id, "retry")).status_code == 302
    assert ops.get_job(available.id).state == "retryable"
    assert superuser.get(object_action("job", available.id, "cancel")).status_code == 403


def test_bulk_cancel_asks_for_confirmation_with_the_count(superuser, queue):
    jobs = [JobFactory.create(queue=queue) for _ in range(3)]
    form = {"action": "cancel", "_selected_action": [j.id for j in jobs[:2]]}
    confirm = superuser.post(reverse("admin:awa_django_job_action"), form)
    assert confirm.status_code == 200
    assert "Cancel 2 selected jobs?" in confirm.content.decode()
    assert [ops.get_job(j.id).state for j in jobs] == ["available"] * 3
    done = superuser.post(reverse("admin:awa_django_job_action"), {**form, "confirm": "yes"})
    assert done.status_code == 302
    assert [ops.get_job(j.id).state for j in jobs] == ["cancelled", "cancelled", "available"]


@pytest.mark.django_db(transaction=True)
def test_job_page_shows_the_traceback_of_a_failed_attempt(superuser, queue):
    from testapp.jobs import boom

    ref = boom.using(queue=queue, max_attempts=1).enqueue()
    run_burst(queue)
    assert ops.get_job(ref.id).state == "failed"
    body = superuser.get(reverse("admin:awa_django_job_change", args=[ref.id])).content.decode()
    assert "Traceback (most recent call last)" in body
    assert "ValueError" in body and "boom" in body
    assert 'class="awa-traceback"' in body


def test_dlq_bulk_retry_of_everything_matching_the_filter(superuser, queue):
    dead = []
    for n in range(3):
        job = JobFactory.create(queue=f"{queue}-{n % 2}", state="failed")
        assert ops.move_failed_to_dlq(job.id)
        dead.append(job)
    url = reverse("admin:awa_django_deadletter_action")
    form = {"action": "dlq_retry_all", "queue": f"{queue}-0"}
    confirm = superuser.post(url, form)
    assert "Retry 2 dead-letter entries matching" in confirm.content.decode()
    superuser.post(url, {**form, "confirm": "yes", "to_priority": "1"})
    states = [ops.get_job(j.id) for j in dead]
    assert [(s.state, s.priority) for s in states] == [
        ("available", 1),
        ("dlq", 2),
        ("available", 1),
    ]
    superuser.post(url, {"action": "dlq_purge", "_selected_action": [dead[1].id], "confirm": "yes"})
    assert ops.get_job(dead[1].id) is None


def test_queue_pause_resume_and_confirmed_drain(superuser, queue):
    jobs = [JobFactory.create(queue=queue) for _ in range(2)]
    superuser.post(object_action("queue", queue, "pause"))
    assert ops.get_queue(queue).paused
    assert "paused" in superuser.get(changelist("queue")).content.decode()
    superuser.post(object_action("queue", queue, "resume"))
    assert not ops.get_queue(queue).paused
    ask = superuser.post(object_action("queue", queue, "drain"))
    assert "Cancel the 2 available" in ask.content.decode()
    assert ops.get_queue(queue).counts["available"] == 2
    superuser.post(object_action("queue", queue, "drain"), {"confirm": "yes"})
    assert [ops.get_job(j.id).state for j in jobs] == ["cancelled", "cancelled"]


def test_periodic_pause_resume_and_run_now(superuser, queue):
    from testapp.jobs import record

    name = f"{queue}-nightly"
    schedules.add(PeriodicJob(name, record, CronSchedule("0 3 * * *", "UTC"), queue=queue))
    try:
        SyncRunner()(sync_operation(None))
    finally:
        schedules.remove(name)
    assert name in superuser.get(changelist("periodicschedule")).content.decode()
    superuser.post(object_action("periodicschedule", name, "pause"))
    assert ops.get_periodic(name).paused
    superuser.post(object_action("periodicschedule", name, "resume"))
    assert not ops.get_periodic(name).paused
    superuser.post(object_action("periodicschedule", name, "run"))
    assert ops.queue_counts(queue)["available"] == 1


@override_settings(AWA={"ADMIN_READ_ONLY": True})
def test_read_only_setting_removes_and_refuses_every_action(superuser, queue):
    job = JobFactory.create(queue=queue)
    body = superuser.get(changelist("job") + f"?queue={queue}").content.decode()
    assert "Read-only" in body and "_selected_action" not in body
    queue_page = superuser.get(reverse("admin:awa_django_queue_change", args=[queue]))
    assert "Pause</button>" not in queue_page.content.decode()
    for url, data in [
        (object_action("job", job.id, "cancel"), {}),
        (reverse("admin:awa_django_job_action"), {"action": "cancel", "_selected_action": job.id}),
        (object_action("queue", queue, "pause"), {}),
        (object_action("queue", queue, "drain"), {"confirm": "yes"}),
        (reverse("admin:awa_django_deadletter_action"), {"action": "dlq_purge_all"}),
        (object_action("periodicschedule", "any-schedule", "run"), {}),
        (object_action("queue", queue, "resume"), {}),
    ]:
        assert superuser.post(url, data).status_code == 403, url
    assert ops.get_job(job.id).state == "available"
    assert not ops.get_queue(queue).paused


def test_a_read_only_database_switches_the_console_to_read_only(superuser, queue):
    job = JobFactory.create(queue=queue)
    with connection.cursor() as cursor:
        cursor.execute("SET transaction_read_only = on")  # what a hot standby answers
    body = superuser.get(changelist("job")).content.decode()
    assert "Read-only" in body
    assert superuser.post(object_action("job", job.id, "cancel")).status_code == 403


def test_models_refuse_orm_writes(queue):
    job = JobFactory.create(queue=queue)
    row = Job.objects.get(pk=job.id)
    assert row.state == "available" and row.queue == queue
    with pytest.raises(ReadOnlyModelError):
        row.save()
    with pytest.raises(ReadOnlyModelError):
        row.delete()
    with pytest.raises(ReadOnlyModelError):
        Job.objects.filter(pk=job.id).update(state="completed")
    with pytest.raises(ReadOnlyModelError):
        Job.objects.filter(pk=job.id).delete()
    with pytest.raises(ReadOnlyModelError):
        Job.objects.create(id=1, kind="x")


def test_changelist_query_count_is_bounded(superuser, queue, django_assert_max_num_queries):
    for _ in range(60):
        JobFactory.create(queue=queue)
    with django_assert_max_num_queries(12):
        page = superuser.get(changelist("job") + f"?queue={queue}")
    assert len(re.findall(r'name="_selected_action"', page.content.decode())) == 50
    assert "Older" in page.content.decode()
