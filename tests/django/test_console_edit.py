"""The console's "Edit and retry": form, confirmation with a diff, the edit,
and every refusal (bad JSON, a payload over the limit, arguments the
signature refuses, missing permission, read-only mode) changing nothing."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import override_settings
from django.urls import reverse

from awa_django import ops
from awa_django.models import Job
from tests.django.conftest import console_user
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def charge(queue: str, state: str = "failed", args: str = "[0]") -> int:
    info = JobFactory.create(queue=queue, kind="testapp.charge", args_json=args, state=state)
    return info.id


def edit_url(job_id: int) -> str:
    return reverse("admin:awa_django_job_edit", args=[job_id])


def detail(client, job_id: int) -> str:
    response = client.get(reverse("admin:awa_django_job_change", args=[job_id]))
    assert response.status_code == 200
    return response.content.decode()


def job_log(job_id: int) -> list[LogEntry]:
    return list(LogEntry.objects.filter(object_id=str(job_id)).order_by("action_time"))


def assert_unchanged(job_id: int, state: str = "failed", args: list | None = None) -> None:
    info = ops.get_job(job_id)
    assert (info.state, info.args) == (state, [0] if args is None else args)
    assert job_log(job_id) == []
    assert all(e.outcome != "ok" for e in ops.audit_log(job_id=job_id))


def test_form_confirmation_with_a_diff_then_the_edit(superuser, queue):
    job_id = charge(queue)
    assert f'href="{edit_url(job_id)}"' in detail(superuser, job_id)

    form = superuser.get(edit_url(job_id))
    assert form.status_code == 200
    page = form.content.decode()
    assert 'name="args"' in page and "[\n  0\n]</textarea>" in page
    assert 'name="kwargs"' in page and "{}</textarea>" in page

    review = superuser.post(edit_url(job_id), {"args": "[7]", "kwargs": '{"amount": 4}'})
    assert review.status_code == 200
    diff = [line for _, line in review.context["diff"]]
    assert "-  0" in diff and "+  7" in diff
    assert '+  "amount": 4' in diff and "-{}" in diff
    assert 'class="awa-diff-add"' in review.content.decode()
    assert_unchanged(job_id)  # reviewing writes nothing

    again = superuser.post(edit_url(job_id), {"args": "[7]", "kwargs": "{}", "back": "yes"})
    assert again.status_code == 200 and again.context["args_text"] == "[7]"

    done = superuser.post(
        edit_url(job_id), {"args": "[7]", "kwargs": '{"amount": 4}', "confirm": "yes"}
    )
    assert done.status_code == 302
    assert done["Location"] == reverse("admin:awa_django_job_change", args=[job_id])
    info = ops.get_job(job_id)
    assert (info.state, info.attempt, info.args, info.kwargs) == (
        "available",
        0,
        [7],
        {"amount": 4},
    )
    (entry,) = job_log(job_id)
    assert entry.user.username == "root" and entry.content_type.model_class() is Job
    assert entry.change_message.startswith("Edit and retry: args [0] -> [7]")
    (audit,) = ops.audit_log(job_id=job_id)
    assert (audit.actor, audit.action, audit.outcome) == ("root", "edit_and_retry", "ok")
    assert audit.detail == {
        "old_args": [0],
        "old_kwargs": {},
        "args": [7],
        "kwargs": {"amount": 4},
    }
    # The job page shows the edit in the error history, and no more edit button.
    page = detail(superuser, job_id)
    assert "awa_django.edited" in page and "Before: args [0]" in page
    assert edit_url(job_id) not in page


@pytest.mark.parametrize(
    ("args", "kwargs", "why"),
    [
        ("[7", "{}", "args is not valid JSON"),
        ("[7]", "{amount: 1}", "kwargs is not valid JSON"),
        ('"7"', "{}", "args must be a list"),
        ("[7]", "[1]", "kwargs must be a dict"),
        ("[1, 2]", "{}", "arguments do not fit"),
        ("[7]", '{"currency": "EUR"}', "unexpected keyword"),
        (f'["{"x" * 300}"]', "{}", "over the limit of 200"),
    ],
)
@pytest.mark.parametrize("confirm", [False, True])
def test_a_refused_edit_shows_why_on_the_form_and_changes_nothing(
    superuser, queue, args, kwargs, why, confirm
):
    job_id = charge(queue)
    data = {"args": args, "kwargs": kwargs, **({"confirm": "yes"} if confirm else {})}
    with override_settings(AWA={"MAX_PAYLOAD_BYTES": 200}):
        response = superuser.post(edit_url(job_id), data)
    assert response.status_code == 200
    assert response.templates[0].name == "admin/awa_django/job_edit.html"
    assert why in response.context["error"]
    assert response.context["args_text"] == args  # the operator's text, kept to fix
    assert_unchanged(job_id)


def test_a_dead_letter_needs_the_dlq_permission_too(queue):
    job_id = charge(queue)
    ops.move_failed_to_dlq(job_id)
    data = {"args": "[3]", "kwargs": "{}", "confirm": "yes"}

    jobs_only = console_user("jobs-only", "change_job")
    assert edit_url(job_id) not in detail(jobs_only, job_id)
    assert jobs_only.get(edit_url(job_id)).status_code == 403
    assert jobs_only.post(edit_url(job_id), data).status_code == 403
    assert_unchanged(job_id, "dlq")

    both = console_user("both", "change_job", "change_deadletter")
    assert edit_url(job_id) in detail(both, job_id)
    assert both.post(edit_url(job_id), data).status_code == 302
    info = ops.get_job(job_id)
    assert (info.state, info.args) == ("available", [3])
    assert ops.dlq_count(queue=queue) == 0


def test_a_cancelled_job_is_edited_with_the_change_permission(queue):
    job_id = charge(queue, "cancelled")
    client = console_user("changer", "change_job")
    assert edit_url(job_id) in detail(client, job_id)
    response = client.post(edit_url(job_id), {"args": "[5]", "kwargs": "{}", "confirm": "yes"})
    assert response.status_code == 302
    assert ops.get_job(job_id).args == [5]


def test_refused_without_the_change_permission_and_in_read_only_mode(superuser, queue):
    job_id = charge(queue)
    data = {"args": "[3]", "kwargs": "{}", "confirm": "yes"}
    viewer = console_user("viewer", "view_job")
    assert edit_url(job_id) not in detail(viewer, job_id)
    assert viewer.get(edit_url(job_id)).status_code == 403
    assert viewer.post(edit_url(job_id), data).status_code == 403
    with override_settings(AWA={"ADMIN_READ_ONLY": True}):
        assert edit_url(job_id) not in detail(superuser, job_id)
        assert superuser.get(edit_url(job_id)).status_code == 403
        assert superuser.post(edit_url(job_id), data).status_code == 403
    assert_unchanged(job_id)


@pytest.mark.parametrize("state", ["available", "running", "completed"])
def test_a_job_in_another_state_is_not_offered_nor_edited(superuser, queue, state):
    job_id = charge(queue, state)
    assert edit_url(job_id) not in detail(superuser, job_id)
    response = superuser.post(edit_url(job_id), {"args": "[3]", "kwargs": "{}", "confirm": "yes"})
    assert response.status_code == 302  # back to the job page, which says why
    messages = [str(m) for m in response.wsgi_request._messages]
    assert messages == [
        f"job {job_id} is {state}: only a failed, cancelled or dead-lettered "
        "job can be edited and retried"
    ]
    assert_unchanged(job_id, state)


def test_an_unknown_job_is_404(superuser):
    assert superuser.get(edit_url(2**62)).status_code == 404
    assert superuser.get(edit_url(0)).status_code == 404
