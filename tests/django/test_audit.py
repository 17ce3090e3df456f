"""The audit trail: ops given an actor, the management commands and the console."""

from __future__ import annotations

import getpass
import inspect
import io
import socket

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import transaction
from django.test import override_settings
from django.urls import reverse

from awa_django import ops
from awa_django.exceptions import InvalidJob, JobNotFound
from awa_django.models import Job
from awa_django.storage import SyncRunner
from awa_django.storage import audit as audit_store
from tests.django.conftest import console_user
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

#: Every function of ops that changes jobs, queues, schedules or batches.
MUTATING = (
    "cancel_job",
    "retry_job",
    "edit_and_retry",
    "dlq_retry",
    "dlq_purge",
    "dlq_retry_all",
    "dlq_purge_all",
    "move_failed_to_dlq",
    "pause_queue",
    "resume_queue",
    "drain_queue",
    "set_enqueue_shards",
    "set_queue_override",
    "clear_queue_override",
    "pause_periodic",
    "resume_periodic",
    "trigger_periodic",
    "submit_batch_operation",
    "cancel_batch_operation",
    "complete_external",
    "fail_external",
    "retry_external",
    "resume_external",
)


def job_history(job_id: int) -> list[LogEntry]:
    return list(
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(Job), object_id=str(job_id)
        ).order_by("action_time")
    )


def test_every_mutating_ops_function_and_its_async_twin_take_an_actor():
    for name in MUTATING:
        assert "actor" in inspect.signature(getattr(ops, name)).parameters, name
        assert "actor" in inspect.signature(getattr(ops, f"a{name}")).parameters, name


def test_an_action_given_an_actor_is_recorded_with_its_target_count_and_outcome(queue):
    job = JobFactory.create(queue=queue)
    assert ops.cancel_job(job.id, actor="alice", reason="customer asked")
    assert not ops.cancel_job(job.id, actor="alice")  # already cancelled
    latest, first = ops.audit_log(job_id=job.id)
    assert (first.actor, first.action, first.target) == ("alice", "cancel_job", f"job {job.id}")
    assert (first.count, first.outcome, first.job_ids) == (1, "ok", [job.id])
    assert first.detail == {"reason": "customer asked"}
    assert (latest.count, latest.outcome) == (0, "unchanged")
    assert latest.at >= first.at


def test_without_an_actor_nothing_is_written(queue):
    job = JobFactory.create(queue=queue)
    ops.cancel_job(job.id)
    ops.pause_queue(queue)
    assert ops.audit_log(job_id=job.id) == []
    assert ops.audit_log(queue=queue) == []


def test_a_refused_action_is_recorded_with_its_error_and_still_raises(queue):
    missing = 10**15 + 7
    with pytest.raises(JobNotFound):
        ops.retry_job(missing, actor="bob")
    (entry,) = ops.audit_log(job_id=missing)
    assert entry.outcome == f"refused: no job with id {missing}"
    assert entry.count == 0


def test_an_action_rolled_back_by_its_caller_leaves_no_entry(queue):
    job = JobFactory.create(queue=queue)

    class AbandonError(Exception):
        pass

    with pytest.raises(AbandonError), transaction.atomic():
        ops.cancel_job(job.id, actor="carol")
        raise AbandonError
    assert ops.get_job(job.id).state == "available"
    assert ops.audit_log(job_id=job.id) == []


def test_a_bad_actor_is_refused_before_anything_changes(queue):
    job = JobFactory.create(queue=queue)
    for bad in ("", "   ", "x" * 301, 42):
        with pytest.raises(InvalidJob, match="actor"):
            ops.cancel_job(job.id, actor=bad)  # type: ignore[arg-type]
    assert ops.get_job(job.id).state == "available"
    assert ops.audit_log(job_id=job.id) == []


def test_a_bulk_dlq_retry_records_one_entry_with_its_filter_and_total(queue):
    for _ in range(3):
        job = JobFactory.create(queue=queue, state="failed")
        assert ops.move_failed_to_dlq(job.id)
    assert ops.dlq_retry_all(queue=queue, to_priority=1, batch_size=2, actor="dave") == 3
    (entry,) = ops.audit_log(queue=queue)
    assert (entry.action, entry.count, entry.outcome) == ("dlq_retry_all", 3, "ok")
    assert entry.target == f"dlq where queue={queue}"
    assert entry.detail["to_priority"] == 1


def test_queue_and_schedule_actions_name_their_target(queue):
    ops.pause_queue(queue, actor="erin")
    ops.set_queue_override(queue, actor="erin", max_workers=3)
    ops.clear_queue_override(queue, actor="erin")
    ops.resume_queue(queue, actor="erin")
    entries = ops.audit_log(queue=queue)
    assert [e.action for e in entries] == [
        "resume_queue",
        "clear_queue_override",
        "set_queue_override",
        "pause_queue",
    ]
    assert {e.target for e in entries} == {f"queue {queue}"}
    assert entries[2].detail == {"max_workers": 3}
    assert ops.audit_log(queue=queue, actor="someone else") == []
    assert len(ops.audit_log(queue=queue, limit=2)) == 2


@pytest.mark.django_db(transaction=True)
def test_a_command_records_the_os_user_and_host(queue, reset_awa):
    job = JobFactory.create(queue=queue)
    call_command("awa_job", "cancel", str(job.id), stdout=io.StringIO())
    (entry,) = ops.audit_log(job_id=job.id)
    assert entry.actor == f"{getpass.getuser()}@{socket.gethostname()}"
    assert (entry.action, entry.count) == ("cancel_job", 1)


@pytest.mark.django_db(transaction=True)
def test_cleanup_deletes_entries_older_than_the_retention(queue, reset_awa):
    ops.pause_queue(queue, actor="frank")
    run = SyncRunner()
    run(audit_store.cleanup(3600.0, 10_000))
    assert len(ops.audit_log(queue=queue)) == 1  # younger than an hour: kept
    assert run(audit_store.cleanup(0.0, 10_000)) >= 1
    assert ops.audit_log(queue=queue) == []


def test_a_console_action_writes_log_entry_and_the_audit_log(superuser, queue):
    job = JobFactory.create(queue=queue)
    url = reverse("admin:awa_django_job_object_action", args=[job.id, "cancel"])
    assert superuser.post(url).status_code == 302
    (logged,) = job_history(job.id)
    assert (logged.user.username, logged.action_flag) == ("root", CHANGE)
    assert logged.change_message == f"Cancel: job {job.id} cancelled"
    (entry,) = ops.audit_log(job_id=job.id)
    assert (entry.actor, entry.action) == ("root", "cancel_job")

    history = superuser.get(reverse("admin:awa_django_job_history", args=[job.id]))
    assert history.status_code == 200
    body = history.content.decode()
    assert "root" in body and f"job {job.id} cancelled" in body
    detail = superuser.get(reverse("admin:awa_django_job_change", args=[job.id]))
    assert reverse("admin:awa_django_job_history", args=[job.id]) in detail.content.decode()


def test_a_console_bulk_action_logs_each_job_it_changed(superuser, queue):
    done = JobFactory.create(queue=queue, state="completed")
    jobs = [JobFactory.create(queue=queue) for _ in range(2)]
    form = {"action": "cancel", "_selected_action": [j.id for j in [*jobs, done]], "confirm": "y"}
    superuser.post(reverse("admin:awa_django_job_action"), form)
    for job in jobs:
        assert [e.change_message for e in job_history(job.id)] == ["Cancel (bulk action)"]
    assert job_history(done.id) == []  # already finished: nothing changed
    assert ops.audit_log(job_id=done.id)[0].outcome == "unchanged"


def test_console_dlq_actions_land_in_the_jobs_history(superuser, queue):
    job = JobFactory.create(queue=queue, state="failed")
    superuser.post(reverse("admin:awa_django_job_object_action", args=[job.id, "dlq"]))
    url = reverse("admin:awa_django_deadletter_action")
    superuser.post(url, {"action": "dlq_retry", "_selected_action": [job.id], "confirm": "yes"})
    messages = [e.change_message for e in job_history(job.id)]
    assert messages == [
        f"Move to DLQ: job {job.id} moved to the DLQ",
        "Retry from the DLQ (bulk action)",
    ]
    assert [e.action for e in ops.audit_log(job_id=job.id)] == ["dlq_retry", "move_failed_to_dlq"]


def test_refused_console_actions_write_nothing(queue):
    job = JobFactory.create(queue=queue)
    viewer = console_user("viewer", "view_job")
    url = reverse("admin:awa_django_job_object_action", args=[job.id, "cancel"])
    assert viewer.post(url).status_code == 403
    with override_settings(AWA={"ADMIN_READ_ONLY": True}):
        root = console_user("operator", "view_job", "change_job")
        assert root.post(url).status_code == 403
    assert job_history(job.id) == []
    assert ops.audit_log(job_id=job.id) == []
    assert ops.get_job(job.id).state == "available"


def test_the_history_of_an_id_that_is_no_number_is_not_found(superuser):
    response = superuser.get(reverse("admin:awa_django_job_history", args=["abc"]))
    assert response.status_code == 302  # Django's "does not exist" redirect
