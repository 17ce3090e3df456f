"""Each console action checks the permission of what it changes (issue 30, point 3).

A user holding only ``change_job`` could purge a dead letter through the
job page's per-job actions while the DLQ page refused the same user.  Here
every action endpoint of every console page is posted by users holding
exactly one ``change_*`` permission: only the permissions the action needs
get past the check, and a refused action changes nothing.
"""

from __future__ import annotations

import uuid

import pytest
from django.contrib import admin
from django.urls import reverse

from awa_django import ops
from awa_django.admin.base import BULK, ConsoleAdmin
from tests.django.conftest import console_user
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

CONSOLE: dict[str, ConsoleAdmin] = {
    model._meta.model_name: model_admin
    for model, model_admin in admin.site._registry.items()
    if isinstance(model_admin, ConsoleAdmin)
}
# What each action changes, by the model whose permission guards it.
EXPECTED = {
    ("job", "retry"): {"job"},
    ("job", "cancel"): {"job"},
    ("job", "dlq"): {"job", "deadletter"},
    ("job", "dlq_retry"): {"deadletter"},
    ("job", "dlq_purge"): {"deadletter"},
    ("queue", "pause"): {"queue"},
    ("queue", "resume"): {"queue"},
    ("queue", "drain"): {"queue", "job"},
    ("periodicschedule", "pause"): {"periodicschedule"},
    ("periodicschedule", "resume"): {"periodicschedule"},
    ("periodicschedule", "run"): {"periodicschedule"},
    ("batchoperation", "cancel"): {"batchoperation"},
    ("batchoperation", BULK): {"batchoperation", "job"},
}
# The lists' admin actions (get_actions), by the models whose change
# permission each needs.
ADMIN_ACTIONS = {
    ("job", "retry"): {"job"},
    ("job", "cancel"): {"job"},
    ("job", "move_to_dlq"): {"job", "deadletter"},
    ("job", "dlq_retry"): {"deadletter"},
    ("job", "dlq_purge"): {"deadletter"},
    ("deadletter", "dlq_retry"): {"deadletter"},
    ("deadletter", "dlq_purge"): {"deadletter"},
    ("deadletter", "dlq_retry_all"): {"deadletter"},
    ("deadletter", "dlq_purge_all"): {"deadletter"},
    ("queue", "pause"): {"queue"},
    ("queue", "resume"): {"queue"},
    ("queue", "drain"): {"queue", "job"},
    ("periodicschedule", "pause"): {"periodicschedule"},
    ("periodicschedule", "resume"): {"periodicschedule"},
    ("periodicschedule", "run_now"): {"periodicschedule"},
}


def endpoints() -> list[tuple[str, str]]:
    found = []
    for model, page in CONSOLE.items():
        found += [(model, action) for action in page.object_actions]
        if not page.actions and type(page).bulk_action is not ConsoleAdmin.bulk_action:
            found.append((model, BULK))
    return sorted(found)


def endpoint_url(model: str, action: str, key: object = "0") -> str:
    if action == BULK:
        return reverse(f"admin:awa_django_{model}_action")
    return reverse(f"admin:awa_django_{model}_object_action", args=[key, action])


def test_the_table_names_every_action_endpoint_of_the_console():
    assert set(endpoints()) == set(EXPECTED)
    for (model, action), needs in EXPECTED.items():
        assert set(CONSOLE[model].action_permissions(action)) == {
            f"awa_django.change_{m}" for m in needs
        }, (model, action)


def test_a_user_holding_one_permission_reaches_only_the_actions_it_covers():
    """Every endpoint, every single change permission: 403 unless it is all the action needs."""
    users = {model: console_user(f"only-{model}", f"change_{model}") for model in CONSOLE}
    for model, action in endpoints():
        needs = EXPECTED[(model, action)]
        for holder, client in users.items():
            status = client.post(endpoint_url(model, action), {}).status_code
            if needs == {holder}:
                assert status != 403, (model, action, holder)
            else:
                assert status == 403, (model, action, holder)


def _request_of(*perms: str) -> object:
    from django.contrib.auth.models import Permission, User
    from django.test import RequestFactory

    user = User.objects.create_user(f"user-{uuid.uuid4().hex}", is_staff=True)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="awa_django", codename=codename)
        )
    request = RequestFactory().get("/")
    request.user = User.objects.get(pk=user.pk)  # a fresh permission cache
    return request


def test_the_lists_offer_exactly_the_admin_actions_of_the_table():
    offered = {
        (model, name)
        for model, page in CONSOLE.items()
        for name in page.get_actions(_request_of(*(f"change_{m}" for m in CONSOLE)))
    }
    assert offered == set(ADMIN_ACTIONS)


def test_an_admin_action_is_offered_only_with_every_permission_it_needs():
    for (model, name), needs in ADMIN_ACTIONS.items():
        page = CONSOLE[model]
        assert name in page.get_actions(_request_of(*(f"change_{m}" for m in needs))), name
        for missing in needs:
            fewer = [f"change_{m}" for m in needs if m != missing]
            assert name not in page.get_actions(_request_of(*fewer)), (name, missing)


def test_an_admin_action_not_offered_is_refused_and_changes_nothing(queue):
    job = JobFactory.create(queue=queue)
    viewer = console_user("viewer-only", "view_job", "change_deadletter")
    form = {"action": "cancel", "_selected_action": [job.id], "confirm": "yes"}
    assert viewer.post(endpoint_url("job", BULK), form).status_code == 403
    assert viewer.post(reverse("admin:awa_django_job_changelist"), form).status_code == 403
    assert ops.get_job(job.id).state == "available"


def test_change_job_alone_cannot_purge_or_retry_a_dead_letter_from_the_job_page(queue):
    """The reported bypass: job/<id>/action/dlq_purge/ answered 302 and the job was gone."""
    dead = JobFactory.create(queue=queue, state="failed")
    failed = JobFactory.create(queue=queue, state="failed")
    assert ops.move_failed_to_dlq(dead.id)
    jobs_only = console_user("jobs-only", "view_job", "change_job")
    for action in ("dlq_purge", "dlq_retry"):
        assert jobs_only.post(endpoint_url("job", action, dead.id)).status_code == 403
        assert ops.get_job(dead.id).state == "dlq"
    assert jobs_only.post(endpoint_url("job", "dlq", failed.id)).status_code == 403
    assert ops.get_job(failed.id).state == "failed"
    # The DLQ page refuses the same user, as it did already.
    form = {"action": "dlq_purge", "_selected_action": [dead.id], "confirm": "yes"}
    assert jobs_only.post(endpoint_url("deadletter", BULK), form).status_code == 403
    assert ops.get_job(dead.id).state == "dlq"
    # The job page offers none of these buttons to that user.
    page = jobs_only.get(reverse("admin:awa_django_job_change", args=[dead.id])).content.decode()
    assert "dlq_purge" not in page and "dlq_retry" not in page


def test_the_dead_letter_permission_purges_from_either_page(queue):
    dead = [JobFactory.create(queue=queue, state="failed") for _ in range(2)]
    for job in dead:
        assert ops.move_failed_to_dlq(job.id)
    keeper = console_user("dlq-keeper", "view_job", "change_deadletter")
    page = keeper.get(reverse("admin:awa_django_job_change", args=[dead[0].id])).content.decode()
    assert "dlq_purge" in page
    assert keeper.post(endpoint_url("job", "dlq_purge", dead[0].id)).status_code == 302
    assert ops.get_job(dead[0].id) is None
    form = {"action": "dlq_purge", "_selected_action": [dead[1].id], "confirm": "yes"}
    assert keeper.post(endpoint_url("deadletter", BULK), form).status_code == 302
    assert ops.get_job(dead[1].id) is None


def test_draining_a_queue_needs_the_job_permission_too(queue):
    jobs = [JobFactory.create(queue=queue) for _ in range(2)]
    queues_only = console_user("queues-only", "view_queue", "change_queue")
    page = queues_only.get(reverse("admin:awa_django_queue_change", args=[queue]))
    assert "Pause</button>" in page.content.decode()
    assert "Drain" not in page.content.decode()
    drain = endpoint_url("queue", "drain", queue)
    assert queues_only.post(drain).status_code == 403
    assert queues_only.post(drain, {"confirm": "yes"}).status_code == 403
    assert [ops.get_job(j.id).state for j in jobs] == ["available", "available"]
    both = console_user("queues-and-jobs", "view_queue", "change_queue", "change_job")
    assert both.post(drain, {"confirm": "yes"}).status_code == 302
    assert [ops.get_job(j.id).state for j in jobs] == ["cancelled", "cancelled"]


def test_submitting_a_batch_operation_needs_the_job_permission_too(queue):
    job = JobFactory.create(queue=queue)
    form = {
        "op_kind": "set_priority",
        "queue": queue,
        "state": ["available"],
        "priority": "1",
        "confirm": "yes",
    }
    batches_only = console_user("batches-only", "view_batchoperation", "change_batchoperation")
    page = batches_only.get(reverse("admin:awa_django_batchoperation_changelist"))
    assert "awa-batch-form" not in page.content.decode()
    assert batches_only.post(endpoint_url("batchoperation", BULK), form).status_code == 403
    assert ops.list_batch_operations(limit=10) == []
    both = console_user("batches-and-jobs", "change_batchoperation", "change_job")
    assert both.post(endpoint_url("batchoperation", BULK), form).status_code == 302
    assert [op.total for op in ops.list_batch_operations(limit=10)] == [1]
    assert ops.get_job(job.id).priority == 2  # applied later by the leader
