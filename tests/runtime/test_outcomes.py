"""Handler outcomes through a real (in-process) worker against PostgreSQL.

Time bounds bracket the burst (taken before and after it), so worker
start-up never eats into a window an assertion depends on.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from testapp import jobs
from testapp.models import Execution

from awa_django import ops
from awa_django.domain.backoff import MAX_BACKOFF, retry_delay
from awa_django.storage import run
from awa_django.storage.enqueue import enqueue_one
from tests.conftest import run_burst
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def labels(job_id: int) -> list[tuple[str, int]]:
    return list(
        Execution.objects.filter(job_id=job_id).order_by("id").values_list("label", "attempt")
    )


def test_sync_async_and_context_handlers_complete_with_return_values(queue):
    sync_ref = jobs.record.using(queue=queue).enqueue("sync")
    async_ref = jobs.record_async.using(queue=queue).enqueue("async")
    plain_ref = jobs.plain.using(queue=queue).enqueue(2, b=40)

    worker = run_burst(queue)

    assert worker.completed == 3
    sync_info, async_info, plain_info = (
        ops.get_job(r.id) for r in (sync_ref, async_ref, plain_ref)
    )
    assert (sync_info.state, sync_info.return_value) == (
        "completed",
        {"label": "sync", "attempt": 1},
    )
    assert (async_info.state, async_info.return_value) == ("completed", "async")
    assert (plain_info.state, plain_info.return_value, plain_info.attempt) == ("completed", 42, 1)
    assert plain_info.run_lease == 1 and plain_info.finalized_at is not None
    assert labels(sync_ref.id) == [("sync", 1)] and labels(async_ref.id) == [("async", 1)]
    assert ops.queue_counts(queue)["completed"] == 3


def test_an_async_handler_times_itself_out_in_its_own_task(queue):
    """``asyncio.timeout`` and ``asyncio.TaskGroup`` on a handler's first
    line bind to the attempt's task: the timeout fails that attempt alone,
    and the worker's claim loop (the caller of the attempt's first step)
    runs on to the next job."""
    timed = jobs.timed_async.using(queue=queue).enqueue(0.05)
    after = jobs.plain.using(queue=queue).enqueue(1, b=1)

    run_burst(queue)

    info = ops.get_job(timed.id)
    assert info.state == "failed"
    assert [e["type"] for e in info.errors] == ["builtins.TimeoutError"]
    assert ops.get_job(after.id).state == "completed"


def test_retry_after_counts_an_attempt_and_schedules_the_retry(queue):
    ref = jobs.retry_after.using(queue=queue).enqueue(3600)
    before = dt.datetime.now(dt.UTC)
    run_burst(queue)
    after = dt.datetime.now(dt.UTC)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt, info.run_lease) == ("retryable", 1, 1)
    # Due 3600 s after the failure, which happened while the burst ran.
    assert before + dt.timedelta(seconds=3600) <= info.run_at <= after + dt.timedelta(seconds=3600)
    [error] = info.errors
    assert error["attempt"] == 1 and error["type"] == "awa_django.outcomes.RetryAfter"
    assert error["traceback"] and error["at"]


def test_errors_survive_a_later_success(queue):
    ref = jobs.fail_then_succeed.using(queue=queue).enqueue(2)
    run_burst(queue)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt, info.return_value) == ("completed", 3, "ok")
    assert [e["attempt"] for e in info.errors] == [1, 2]
    assert [e["message"] for e in info.errors] == ["failing attempt 1", "failing attempt 2"]
    assert labels(ref.id) == [("attempt", 1), ("attempt", 2), ("attempt", 3)]


def test_max_attempts_exhaustion_fails_the_job(queue):
    ref = jobs.fail_then_succeed.using(queue=queue, max_attempts=2).enqueue(5)
    run_burst(queue)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("failed", 2)
    assert len(info.errors) == 2
    assert ops.queue_counts(queue)["failed"] == 1


def test_plain_exception_retries_with_backoff_then_fails(queue):
    ref = jobs.boom.using(queue=queue).enqueue()
    last = jobs.boom.using(queue=queue, max_attempts=1).enqueue()
    before = dt.datetime.now(dt.UTC)
    run_burst(queue)
    after = dt.datetime.now(dt.UTC)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("retryable", 1)
    # attempt 1 failed (while the burst ran): 2 s base, up to 25 % jitter.
    assert before + dt.timedelta(seconds=2) <= info.run_at <= after + dt.timedelta(seconds=2.5)
    assert info.errors[0]["type"] == "builtins.ValueError" and "boom" in info.errors[0]["traceback"]
    exhausted = ops.get_job(last.id)
    assert (exhausted.state, exhausted.attempt, len(exhausted.errors)) == ("failed", 1, 1)


def test_backoff_bounds():
    for attempt in range(1, 30):
        base = min(2.0**attempt, MAX_BACKOFF)
        for _ in range(20):
            assert base <= retry_delay(attempt) <= base * 1.25


def test_snooze_does_not_count_an_attempt(queue):
    ref = jobs.snooze_once.using(queue=queue).enqueue()
    run_burst(queue)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt, info.return_value) == ("completed", 1, "woke")
    assert info.run_lease == 2  # two claims
    assert labels(ref.id) == [("snooze_once", 1), ("snooze_once", 1)]
    assert info.errors == []


def test_cancel_and_terminal_error(queue):
    cancelled = jobs.cancel.using(queue=queue).enqueue()
    failed = jobs.terminal.using(queue=queue).enqueue()
    run_burst(queue)

    info = ops.get_job(cancelled.id)
    assert info.state == "cancelled" and info.errors[0]["message"] == "not needed any more"
    info = ops.get_job(failed.id)
    assert (info.state, info.attempt) == ("failed", 1)
    assert info.errors[0]["message"] == "card declined"
    assert labels(failed.id) == [("terminal", 1)]  # no retry


def test_terminal_failure_goes_to_dlq_when_the_queue_has_one(queue):
    ref = jobs.terminal.using(queue=queue).enqueue()
    run_burst(queue, dlq=True)
    info = ops.get_job(ref.id)
    assert info.state == "dlq" and info.errors[0]["message"] == "card declined"
    assert ops.queue_counts(queue)["dlq"] == 1


def _raw_job(queue: str, kind: str, args_json: str, kwargs_json: str = "{}") -> int:
    """A job written as an older or foreign producer might have (no validation)."""
    prepared = JobFactory.build(
        kind=kind, queue=queue, max_attempts=5, args_json=args_json, kwargs_json=kwargs_json
    )
    return run(enqueue_one(prepared)).id


def test_unknown_kind_fails_terminally(queue):
    job_id = _raw_job(queue, "nobody.registered.this", "[]")
    run_burst(queue)
    info = ops.get_job(job_id)
    assert (info.state, info.attempt) == ("failed", 1)
    assert info.errors[0]["message"] == "unknown job kind: nobody.registered.this"


def test_arguments_that_no_longer_fit_fail_terminally(queue):
    job_id = _raw_job(queue, "testapp.plain", "[1, 2, 3]", '{"c": 1}')
    run_burst(queue)
    info = ops.get_job(job_id)
    assert info.state == "failed" and info.attempt == 1
    assert "arguments do not fit" in info.errors[0]["message"]


def test_a_job_rolled_back_with_its_transaction_never_runs(queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        doomed = jobs.record.using(queue=queue).enqueue("doomed")
        raise RuntimeError
    kept = jobs.record.using(queue=queue).enqueue("kept")
    run_burst(queue)
    assert labels(doomed.id) == []
    assert labels(kept.id) == [("kept", 1)]
    assert ops.get_job(doomed.id) is None


def test_fifo_within_a_lane_and_priority_order(queue):
    order = []
    for n in range(15):
        order.append(jobs.record.using(queue=queue).enqueue(f"fifo-{n}").id)
    low = [jobs.record.using(queue=queue, priority=4).enqueue("p4").id for _ in range(3)]
    high = [jobs.record.using(queue=queue, priority=1).enqueue("p1").id for _ in range(3)]

    run_burst(queue, max_workers=1, claim_batch_size=1)

    ran = list(Execution.objects.order_by("id").values_list("job_id", flat=True))
    assert ran == high + order + low


def test_progress_survives_a_retry_and_is_cleared_on_completion(queue):
    ref = jobs.checkpoint.using(queue=queue).enqueue()
    run_burst(queue)
    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("completed", 2)
    # Attempt 2 resumed from the checkpoint attempt 1 reported.
    assert info.return_value == {"resumed_from": 5}
    assert info.progress is None


def test_progress_of_a_failed_job_is_kept(queue):
    ref = jobs.checkpoint.using(queue=queue, max_attempts=1).enqueue()
    run_burst(queue)
    info = ops.get_job(ref.id)
    assert info.state == "failed"
    assert info.progress == {"percent": 50, "message": "half way", "checkpoint": {"done": 5}}
