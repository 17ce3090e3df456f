"""``drain()``: ready jobs run inline through the worker's claim and close."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.test import override_settings
from testapp.models import Execution

from awa_django import InvalidJob, ops
from awa_django.testing import OUTCOMES, assert_enqueued, drain, freeze_clock, refute_enqueued
from tests.conftest import reset_queue_storage, run_burst
from tests.factories import JobFactory

from . import jobs

NOTHING = dict.fromkeys(OUTCOMES, 0)


def counts(**given: int) -> dict[str, int]:
    return {**NOTHING, **given}


def labels(job_id: int) -> list[tuple[str, int]]:
    return list(
        Execution.objects.filter(job_id=job_id).order_by("id").values_list("label", "attempt")
    )


# --- inside the test's transaction (pytest-django's db = a TestCase) -----------------


@pytest.mark.django_db
def test_drain_runs_the_tests_own_uncommitted_jobs(queue):
    sync_ref = jobs.record.using(queue=queue).enqueue("sync")
    async_ref = jobs.record_async.using(queue=queue).enqueue("async")

    assert drain(queue) == counts(completed=2)

    sync_info, async_info = ops.get_job(sync_ref.id), ops.get_job(async_ref.id)
    assert (sync_info.state, sync_info.attempt, sync_info.run_lease) == ("completed", 1, 1)
    assert sync_info.return_value == {"label": "sync", "attempt": 1}
    assert (async_info.state, async_info.return_value) == ("completed", "async")
    # The handlers' ORM writes joined the test's transaction (async ones too).
    assert labels(sync_ref.id) == [("sync", 1)] and labels(async_ref.id) == [("async", 1)]
    assert drain(queue) == NOTHING


@pytest.mark.django_db
def test_every_outcome_is_counted_as_a_worker_writes_it(queue):
    refs = {
        what: jobs.outcome.using(queue=queue).enqueue(what)
        for what in ("ok", "retry", "boom", "snooze", "cancel", "terminal")
    }

    assert drain(queue) == counts(completed=1, retried=2, snoozed=1, cancelled=1, failed=1)

    states = {what: ops.get_job(ref.id) for what, ref in refs.items()}
    assert {what: info.state for what, info in states.items()} == {
        "ok": "completed",
        "retry": "retryable",
        "boom": "retryable",
        "snooze": "scheduled",
        "cancel": "cancelled",
        "terminal": "failed",
    }
    assert states["snooze"].attempt == 0  # a snooze does not count an attempt
    boom = states["boom"].errors[0]
    assert boom["type"] == "builtins.ValueError" and boom["message"] == "boom"
    assert boom["traceback"].endswith("ValueError: boom\n")
    # Retries are not due yet: a second drain runs nothing.
    assert drain(queue) == NOTHING


@pytest.mark.django_db
def test_a_queue_with_a_dlq_counts_terminal_failures_as_dlq(queue):
    with override_settings(AWA={"QUEUE_DLQ": {queue: True}}):
        ref = jobs.outcome.using(queue=queue).enqueue("terminal")
        assert drain(queue) == counts(dlq=1)
    assert ops.get_job(ref.id).state == "dlq"


@pytest.mark.django_db
def test_max_attempts_exhausted_fails(queue):
    ref = jobs.outcome.using(queue=queue, max_attempts=1).enqueue("boom")
    assert drain(queue) == counts(failed=1)
    assert ops.get_job(ref.id).state == "failed"


@pytest.mark.django_db
def test_recursion_runs_what_drained_jobs_enqueue(queue):
    ref = jobs.parent.using(queue=queue).enqueue(3, depth=2)  # 1 + 3 parents + 9 children

    assert drain(queue) == counts(completed=13)

    assert ops.get_job(ref.id).state == "completed"
    assert ops.queue_counts(queue)["completed"] == 13


@pytest.mark.django_db
def test_without_recursion_only_the_jobs_ready_at_the_start_run(queue):
    jobs.parent.using(queue=queue).enqueue(2)

    assert drain(queue, with_recursion=False) == counts(completed=1)

    assert len(assert_enqueued(jobs.record, args=["child"], queue=queue)) == 2
    assert drain(queue, with_recursion=False) == counts(completed=2)
    refute_enqueued(queue=queue)


@pytest.mark.django_db
def test_limit_bounds_how_many_jobs_run(queue):
    for n in range(5):
        jobs.record.using(queue=queue).enqueue(f"job {n}")

    assert drain(queue, limit=2) == counts(completed=2)
    assert len(assert_enqueued(jobs.record, queue=queue)) == 3
    assert drain(queue, limit=0) == NOTHING
    assert drain(queue) == counts(completed=3)


@pytest.mark.django_db
def test_a_queue_argument_leaves_other_queues_alone(queue):
    other = f"{queue}-other"
    jobs.record.using(queue=queue).enqueue("mine")
    theirs = jobs.record.using(queue=other).enqueue("theirs")

    assert drain(queue) == counts(completed=1)
    assert ops.get_job(theirs.id).state == "available"
    assert drain(other) == counts(completed=1)


@pytest.mark.django_db
def test_a_paused_queue_is_not_drained(queue):
    ref = jobs.record.using(queue=queue).enqueue()
    ops.pause_queue(queue)
    assert drain(queue) == NOTHING
    ops.resume_queue(queue)
    assert drain(queue) == counts(completed=1)
    assert ops.get_job(ref.id).state == "completed"


@pytest.mark.django_db
def test_jobs_without_a_runnable_definition_fail_as_on_a_worker(queue):
    unknown = JobFactory(kind="tests.no_such_kind", queue=queue)
    misfit = JobFactory(kind=jobs.record.kind, queue=queue, args_json="[1, 2, 3, 4]")

    assert drain(queue) == counts(failed=2)

    assert ops.get_job(unknown.id).errors[0]["message"] == "unknown job kind: tests.no_such_kind"
    assert ops.get_job(misfit.id).state == "failed"


@pytest.mark.django_db
def test_progress_is_kept_with_a_retry(queue):
    ref = jobs.progress_then_fail.using(queue=queue).enqueue()
    assert drain(queue) == counts(retried=1)
    assert ops.get_job(ref.id).progress == {
        "percent": 40,
        "message": "almost",
        "checkpoint": {"done": 4},
    }


@pytest.mark.django_db
def test_callbacks_need_a_worker(queue):
    ref = jobs.wants_callback.using(queue=queue).enqueue()
    assert drain(queue) == counts(retried=1)
    error = ops.get_job(ref.id).errors[0]
    assert error["type"] == "builtins.RuntimeError"
    assert "needs the attempt to be run by an awa worker" in error["message"]


@pytest.mark.django_db
def test_a_base_exception_hands_the_pass_back_and_propagates(queue):
    first = jobs.interrupt.using(queue=queue, priority=1).enqueue()
    second = jobs.record.using(queue=queue, priority=2).enqueue()

    with pytest.raises(KeyboardInterrupt):
        drain(queue)

    for ref in (first, second):
        info = ops.get_job(ref.id)
        # Handed back as a worker does on shutdown: nothing counted, nothing ran.
        assert info.state in ("available", "scheduled") and info.attempt == 0, info
    assert labels(second.id) == []


def test_bad_arguments_are_refused_before_anything_runs():
    with pytest.raises(InvalidJob):
        drain("not a queue name!")
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="limit must be"):
            drain(limit=bad)


# --- the frozen clock makes scheduled jobs due ------------------------------------------


@pytest.mark.django_db
def test_scheduled_jobs_wait_for_the_frozen_clock(queue):
    with freeze_clock() as clock:
        later = jobs.record.using(queue=queue, run_in=3600).enqueue("later")
        at = jobs.record.using(queue=queue, run_at=clock.now + dt.timedelta(days=2)).enqueue()
        assert ops.get_job(later.id).run_at == clock.now + dt.timedelta(hours=1)

        assert drain(queue) == NOTHING
        clock.advance(3599)
        assert drain(queue) == NOTHING
        clock.advance(dt.timedelta(seconds=1))
        assert drain(queue) == counts(completed=1)
        assert ops.get_job(later.id).state == "completed"
        assert ops.get_job(at.id).state == "scheduled"
        clock.advance(dt.timedelta(days=2))
        assert drain(queue) == counts(completed=1)
    assert ops.get_job(at.id).state == "completed"


@pytest.mark.django_db
def test_retries_are_dated_by_the_frozen_clock(queue):
    ref = jobs.fail_until.using(queue=queue).enqueue(3)
    with freeze_clock() as clock:
        assert drain(queue) == counts(retried=1)
        retry_at = ops.get_job(ref.id).run_at
        assert clock.now < retry_at <= clock.now + dt.timedelta(seconds=3)
        assert drain(queue) == NOTHING  # not due before the clock moves
        clock.advance(3600)
        assert drain(queue) == counts(retried=1)  # attempt 2 fails too
        clock.advance(3600)
        assert drain(queue) == counts(completed=1)
    info = ops.get_job(ref.id)
    assert (info.state, info.attempt, info.return_value) == ("completed", 3, 3)
    assert [e["attempt"] for e in info.errors] == [1, 2]


@pytest.mark.django_db
def test_a_snooze_runs_again_when_the_clock_passes_it(queue):
    ref = jobs.outcome.using(queue=queue).enqueue("snooze")
    with freeze_clock() as clock:
        assert drain(queue) == counts(snoozed=1)
        clock.advance(60)
        assert drain(queue) == counts(snoozed=1)
    assert labels(ref.id) == [("snooze", 1), ("snooze", 1)]


@pytest.mark.django_db
def test_the_frozen_clock_only_promotes_the_drained_queue(queue):
    other = f"{queue}-other"
    with freeze_clock() as clock:
        mine = jobs.record.using(queue=queue, run_in=60).enqueue()
        theirs = jobs.record.using(queue=other, run_in=60).enqueue()
        clock.advance(60)
        assert drain(queue) == counts(completed=1)
        assert ops.get_job(mine.id).state == "completed"
        assert ops.get_job(theirs.id).state == "scheduled"


@pytest.mark.django_db
def test_promotion_leaves_the_tests_lock_timeout_alone(queue):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '7s'")
    with freeze_clock() as clock:
        jobs.record.using(queue=queue, run_in=10).enqueue()
        clock.advance(10)
        assert drain(queue) == counts(completed=1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout')")
        assert cursor.fetchone()[0] == "7s"


# --- committed data (TransactionTestCase) and the worker's own closures ------------------


@pytest.fixture
def committed(transactional_db, reset_awa):
    reset_queue_storage()


def test_drain_on_committed_data_runs_every_queue(committed, queue):
    ref = jobs.parent.using(queue=queue).enqueue(2)
    other = jobs.record.using(queue=f"{queue}-other").enqueue()

    assert drain() == counts(completed=4)

    assert ops.get_job(ref.id).state == ops.get_job(other.id).state == "completed"
    assert Execution.objects.filter(label="child").count() == 2  # committed by each job


def test_a_rolled_back_job_is_never_drained(committed, queue):
    class AbortError(Exception):
        pass

    with pytest.raises(AbortError), transaction.atomic():
        jobs.record.using(queue=queue).enqueue()
        raise AbortError
    assert drain() == NOTHING


@pytest.mark.parametrize("what", ["ok", "boom", "terminal", "cancel", "snooze"])
def test_drain_writes_what_a_worker_writes(committed, queue, what):
    drained = jobs.outcome.using(queue=queue).enqueue(what)
    drain(queue)
    worked = jobs.outcome.using(queue=queue).enqueue(what)
    run_burst(queue)

    a, b = ops.get_job(drained.id), ops.get_job(worked.id)
    assert (a.state, a.attempt, a.return_value, a.progress) == (
        b.state,
        b.attempt,
        b.return_value,
        b.progress,
    )
    assert [(e["type"], e["message"]) for e in a.errors] == [
        (e["type"], e["message"]) for e in b.errors
    ]
