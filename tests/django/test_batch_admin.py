"""The console's batch-operation page: list with progress, preview then submit,
cancel, permissions and read-only mode."""

from __future__ import annotations

import html

import pytest
from django.test import override_settings
from django.urls import reverse

from awa_django import ops
from awa_django.models import BatchOperation, ReadOnlyModelError
from awa_django.storage import batch_ops as batch_store
from awa_django.storage.base import run
from tests.django.conftest import console_user
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

LIST = "admin:awa_django_batchoperation_changelist"
ACTION = "admin:awa_django_batchoperation_action"


def cancel_url(op_id: object) -> str:
    return reverse("admin:awa_django_batchoperation_object_action", args=[op_id, "cancel"])


def jobs(queue: str, n: int) -> None:
    for _ in range(n):
        JobFactory.create(queue=queue)


def text(response) -> str:
    """A page's text with HTML entities decoded (the admin capitalises messages)."""
    return html.unescape(response.content.decode())


def form(queue: str, **fields: object) -> dict[str, object]:
    return {"op_kind": "set_priority", "queue": queue, "state": ["available"], **fields}


def submitted(queue: str) -> BatchOperation:
    op = ops.submit_batch_operation("set_priority", {"queue": queue}, {"priority": 1})
    return BatchOperation.objects.get(pk=op.id)


def test_the_page_lists_operations_with_their_progress(superuser, queue):
    jobs(queue, 3)
    op = submitted(queue)
    step = run(batch_store.step(op.id, 2, 200))  # the leader applied one chunk of two
    assert (step.state, step.done) == ("running", 2)
    body = text(superuser.get(reverse(LIST)))
    assert f"set priority 1 of the available and scheduled jobs of queue {queue!r}" in body
    assert "2 / 3" in body and 'value="67"' in body
    assert "awa-state-running" in body
    assert 'id="awa-batch-form"' in body and cancel_url(op.id) in body
    assert reverse(LIST) in superuser.get(reverse("admin:index")).content.decode()


def test_pages_are_refused_without_staff_or_permissions(queue):
    assert console_user("outsider", staff=False).get(reverse(LIST)).status_code == 302  # to login
    staff = console_user("staff")
    assert staff.get(reverse(LIST)).status_code == 403
    assert staff.post(reverse(ACTION), form(queue, priority="1")).status_code == 403


def test_view_permission_shows_the_list_without_the_form_or_actions(queue):
    jobs(queue, 2)
    op = submitted(queue)
    viewer = console_user("viewer", "view_batchoperation")
    body = viewer.get(reverse(LIST)).content.decode()
    assert str(op.id) in body and "awa-batch-form" not in body and cancel_url(op.id) not in body
    assert viewer.post(reverse(ACTION), form(queue, priority="1")).status_code == 403
    assert viewer.post(cancel_url(op.id)).status_code == 403
    assert ops.get_batch_operation(op.id).state == "pending"
    assert len(ops.list_batch_operations()) == 1


def test_preview_shows_the_count_and_only_the_confirmation_submits(queue):
    jobs(queue, 3)
    # Submitting changes jobs: it takes the job permission too.
    operator = console_user(
        "operator", "view_batchoperation", "change_batchoperation", "change_job"
    )
    preview = operator.post(reverse(ACTION), form(queue, priority="1"))
    assert preview.status_code == 200
    body = text(preview)
    assert "3 jobs match now" in body and f"jobs of queue {queue!r}" in body
    assert 'name="state" value="available"' in body  # carried to the confirmation
    assert ops.list_batch_operations() == []

    done = operator.post(reverse(ACTION), {**form(queue, priority="1"), "confirm": "yes"})
    assert done.status_code == 302
    (op,) = ops.list_batch_operations()
    assert (op.op_kind, op.filter, op.spec, op.total) == (
        "set_priority",
        {"queue": queue, "state": ["available"]},
        {"priority": 1},
        3,
    )
    page = text(operator.get(done["Location"]))
    assert f"Batch operation #{op.id} submitted" in page


def test_a_move_goes_through_the_same_form(superuser, queue):
    jobs(queue, 2)
    fields = form(queue, op_kind="move_queue", to_queue=f"{queue}-b", priority="", confirm="yes")
    assert superuser.post(reverse(ACTION), fields).status_code == 302
    (op,) = ops.list_batch_operations()
    assert (op.op_kind, op.spec, op.total) == ("move_queue", {"queue": f"{queue}-b"}, 2)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"priority": "x"}, "invalid priority 'x'"),
        ({"priority": "9"}, "invalid priority 9"),
        ({"priority": "1", "queue": ""}, "filter needs 'queue'"),
        ({"priority": "1", "state": []}, "filter 'state' must be"),
        ({"op_kind": "move_queue"}, "move_queue needs spec 'queue'"),
        ({"op_kind": "drop", "priority": "1"}, "unknown batch operation 'drop'"),
    ],
)
def test_bad_form_input_is_refused_with_a_message(superuser, queue, fields, message):
    for extra in ({}, {"confirm": "yes"}):
        response = superuser.post(reverse(ACTION), {**form(queue), **fields, **extra}, follow=True)
        body = text(response)
        assert f"Refused: {message}" in body
    assert ops.list_batch_operations() == []


def test_cancel_per_operation(superuser, queue):
    jobs(queue, 2)
    op = submitted(queue)
    page = text(superuser.post(cancel_url(op.id), follow=True))
    assert f"Batch operation #{op.id} cancelled" in page
    assert ops.get_batch_operation(op.id).state == "cancelled"
    again = text(superuser.post(cancel_url(op.id), follow=True))
    assert "had finished already" in again
    assert cancel_url(op.id) not in again  # no button on a finished operation
    unknown = text(superuser.post(cancel_url(op.id + 100), follow=True))
    assert f"No batch operation with id {op.id + 100}" in unknown
    bad = text(superuser.post(cancel_url("abc"), follow=True))
    assert "Refused: batch operation id must be an integer" in bad
    assert superuser.get(cancel_url(op.id)).status_code == 403  # a GET never acts


@override_settings(AWA={"ADMIN_READ_ONLY": True})
def test_read_only_mode_removes_and_refuses_every_action(superuser, queue):
    jobs(queue, 2)
    op = submitted(queue)
    body = superuser.get(reverse(LIST)).content.decode()
    assert "Read-only" in body and "awa-batch-form" not in body and cancel_url(op.id) not in body
    assert superuser.post(reverse(ACTION), form(queue, priority="1")).status_code == 403
    confirmed = {**form(queue, priority="1"), "confirm": "yes"}
    assert superuser.post(reverse(ACTION), confirmed).status_code == 403
    assert superuser.post(cancel_url(op.id)).status_code == 403
    assert [o.state for o in ops.list_batch_operations()] == ["pending"]


def test_the_model_reads_the_table_and_refuses_orm_writes(queue):
    jobs(queue, 1)
    row = submitted(queue)
    assert (row.op_kind, row.state, row.total, row.done) == ("set_priority", "pending", 1, 0)
    assert row.filter == {"queue": queue, "state": ["available", "scheduled"]}
    assert row.spec == {"priority": 1} and str(row) == f"set_priority #{row.id}"
    with pytest.raises(ReadOnlyModelError):
        row.save()
    with pytest.raises(ReadOnlyModelError):
        row.delete()
    with pytest.raises(ReadOnlyModelError):
        BatchOperation.objects.filter(pk=row.id).update(state="cancelled")
    with pytest.raises(ReadOnlyModelError):
        BatchOperation.objects.create(op_kind="set_priority")
    assert ops.get_batch_operation(row.id).state == "pending"
