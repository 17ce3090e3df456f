"""Django tasks on real workers: committed data, worker processes, in-process workers."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings
from testapp import tasks

from awa_django import ops
from tests.conftest import reset_queue_storage, run_burst

from .framework import TaskResultDoesNotExist, TaskResultStatus, default_task_backend, signals

pytestmark = pytest.mark.django_db(transaction=True)

# Worker processes start without system checks: those are tests/django's
# business, and these tests are about running tasks.
BURST = ("--burst", "--skip-checks")


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    reset_queue_storage()


def test_a_worker_process_runs_tasks_it_never_imported(start_worker, queue):
    # The worker autodiscovers ``jobs`` modules only: it imports testapp.tasks
    # when it first claims one of its tasks (the module the job names).
    results = [
        tasks.add.using(queue_name=queue).enqueue(40, b=2),
        tasks.add_async.using(queue_name=queue, priority=60).enqueue(1),
        tasks.record.using(queue_name=queue).enqueue("in a worker"),
        tasks.record_async.using(queue_name=queue).enqueue("async in a worker"),
    ]

    worker = start_worker("--queue", queue, *BURST)
    assert worker.wait(timeout=120) == 0, worker.output()

    for result in results:
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL, (result, worker.output())
        assert result.attempts == 1
        assert result.enqueued_at <= result.started_at <= result.finished_at
    assert [r.return_value for r in results[:2]] == [42, 1]
    assert results[2].return_value == {"label": "in a worker", "attempt": 1, "id": results[2].id}
    assert results[3].return_value == {"label": "async in a worker", "attempt": 1}


def test_a_failing_task_is_retried_by_the_worker(start_worker, queue):
    result = tasks.fail.using(queue_name=queue).enqueue("This task failed")

    worker = start_worker("--queue", queue, *BURST)
    assert worker.wait(timeout=120) == 0, worker.output()

    result.refresh()
    info = ops.get_job(int(result.id))
    assert (info.state, info.attempt) == ("retryable", 1)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert result.errors[0].exception_class is tasks.TaskFailedError
    assert result.errors[0].traceback.endswith("TaskFailedError: This task failed\n")


def test_a_task_enqueued_in_a_rolled_back_transaction_never_runs(start_worker, queue):
    class AbortError(Exception):
        pass

    with pytest.raises(AbortError), transaction.atomic():
        result = tasks.add.using(queue_name=queue).enqueue(1)
        raise AbortError
    kept = tasks.add.using(queue_name=queue).enqueue(2)

    worker = start_worker("--queue", queue, *BURST)
    assert worker.wait(timeout=120) == 0, worker.output()

    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)
    kept.refresh()
    assert kept.status == TaskResultStatus.SUCCESSFUL
    assert ops.queue_counts(queue)["completed"] == 1


def test_signals_on_an_in_process_worker(queue):
    received = []

    def receiver(sender, task_result, signal, **kwargs):
        received.append((signal, task_result.id, task_result.status))

    for signal in (signals.task_started, signals.task_finished):
        signal.connect(receiver, weak=False, dispatch_uid="worker-test")
    try:
        sync = tasks.add.using(queue_name=queue).enqueue(1)
        asynchronous = tasks.add_async.using(queue_name=queue).enqueue(1)
        run_burst(queue)
    finally:
        for signal in (signals.task_started, signals.task_finished):
            signal.disconnect(dispatch_uid="worker-test")

    for result in (sync, asynchronous):
        assert [(s, status) for s, id_, status in received if id_ == result.id] == [
            (signals.task_started, TaskResultStatus.RUNNING),
            (signals.task_finished, TaskResultStatus.SUCCESSFUL),
        ]


@override_settings(
    AWA={"QUEUE_DLQ": {}},
    TASKS={
        "default": {
            "BACKEND": "awa_django.tasks.AwaBackend",
            "QUEUES": [],
            "OPTIONS": {"max_attempts": 1, "dlq": True},
        }
    },
)
def test_the_dlq_option_on_an_in_process_worker(queue):
    result = tasks.fail.using(queue_name=queue).enqueue()
    run_burst(queue)
    assert ops.get_job(int(result.id)).state == "dlq"
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
