"""``@job(atomic=True)``: the handler's writes, its follow-up jobs and its completion
commit together or not at all (see ``awa_django/runtime/attempts/atomic.py``).

Real PostgreSQL and real workers throughout: in-process workers
(``run_burst``, a ``Worker`` with its leader) where a test reads the worker's
counters, ``awa_worker`` processes where a test kills one.  Handlers write
``Execution`` rows (testapp) and enqueue ``record`` follow-ups onto
``<queue>-next``; a row or a follow-up that survives proves a commit.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from testapp import jobs
from testapp.models import Execution

from awa_django import job, ops
from awa_django.jobs import registry
from awa_django.runtime.process.worker import Worker
from awa_django.testing import drain, enqueued_jobs
from docs.examples import atomic_handlers
from tests.conftest import FAST_RESCUE, run_burst, wait_for, worker_config

FAST = FAST_RESCUE

worker_test = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clean(reset_awa):
    yield


def rows(job_id: int) -> list[tuple[str, int]]:
    """(label, run_lease) of the handler rows that committed for ``job_id``."""
    return list(
        Execution.objects.filter(job_id=job_id)
        .exclude(label=jobs.RELEASE)
        .order_by("id")
        .values_list("label", "run_lease")
    )


def follow_ups(queue: str) -> list[list]:
    """Arguments of the follow-up jobs that committed on ``<queue>-next``."""
    return [j.args for j in ops.list_jobs(queue=f"{queue}{jobs.FOLLOW_UP}", limit=1000)]


def release(job_id: int) -> None:
    Execution.objects.create(job_id=job_id, label=jobs.RELEASE)


# --- declaration ------------------------------------------------------------------


def test_atomic_refuses_an_async_handler_at_decoration():
    async def fetch() -> None:
        return None

    with pytest.raises(TypeError, match=r"atomic=True.*async def"):
        job(kind="tests.atomic_async_refused", atomic=True)(fetch)
    assert "tests.atomic_async_refused" not in registry


def test_atomic_is_off_unless_asked_for():
    assert jobs.record.atomic is False
    assert jobs.atomic_record.atomic is True


# --- a worker: all or nothing ---------------------------------------------------------


@worker_test
def test_completion_write_and_follow_up_commit_together(queue, clean):
    ref = jobs.atomic_record.using(queue=queue).enqueue()
    worker = run_burst(queue)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("completed", 1)
    assert info.return_value == {"attempt": 1, "run_lease": 1}
    assert rows(ref.id) == [("atomic", 1)]
    assert follow_ups(queue) == [["after run 1"]]
    assert (worker.completer.applied, worker.completer.stale) == (1, 0)


@worker_test
def test_an_exception_rolls_back_the_write_and_the_follow_up_then_retries(queue, clean):
    ref = jobs.atomic_record.using(queue=queue).enqueue(failures=1, outcome="retry")
    run_burst(queue)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("completed", 2)
    assert [e["message"] for e in info.errors] == ["try again"]
    # The first attempt's row and follow-up were rolled back with it.
    assert rows(ref.id) == [("atomic", 2)]
    assert follow_ups(queue) == [["after run 2"]]


@worker_test
def test_an_attempt_that_fails_for_good_leaves_nothing(queue, clean):
    ref = jobs.atomic_record.using(queue=queue, max_attempts=1).enqueue(failures=1)
    run_burst(queue)

    info = ops.get_job(ref.id)
    assert (info.state, info.errors[-1]["type"]) == ("failed", "builtins.ValueError")
    assert rows(ref.id) == []
    assert follow_ups(queue) == []


@worker_test
@pytest.mark.parametrize(
    ("outcome", "state", "committed"),
    [
        # Snooze: the re-run (same attempt number, next run_lease) completes.
        ("snooze", "completed", [("atomic", 2)]),
        ("cancel", "cancelled", []),
        ("terminal", "failed", []),
    ],
)
def test_snooze_cancel_and_terminal_roll_back_the_handlers_writes(
    queue, clean, outcome, state, committed
):
    ref = jobs.atomic_record.using(queue=queue).enqueue(failures=1, outcome=outcome)
    run_burst(queue)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == (state, 1)
    assert rows(ref.id) == committed
    assert follow_ups(queue) == [[f"after run {lease}"] for _, lease in committed]


@worker_test
def test_a_leased_attempt_commits_through_the_lease_close(queue, clean):
    ref = jobs.atomic_record.using(queue=queue).enqueue(heartbeat=True)
    worker = run_burst(queue)

    assert ops.get_job(ref.id).state == "completed"
    assert rows(ref.id) == [("atomic", 1)]
    assert follow_ups(queue) == [["after run 1"]]
    assert worker.completer.stale == 0


@worker_test
def test_many_atomic_jobs_in_shared_claim_batches_each_commit_once(queue, clean):
    refs = [jobs.atomic_record.using(queue=queue).enqueue() for _ in range(200)]
    worker = run_burst(queue, max_workers=8)

    assert ops.queue_counts(queue)["completed"] == 200
    assert worker.completer.applied == 200
    assert Execution.objects.filter(job_id__in=[r.id for r in refs]).count() == 200
    assert len(follow_ups(queue)) == 200


# --- the run_lease guard inside the transaction ------------------------------------------


@worker_test
def test_a_deadline_rescued_attempt_never_commits(queue, clean):
    ref = jobs.atomic_overrun.using(queue=queue, max_attempts=1).enqueue(2.0)
    with override_settings(AWA={**FAST, "QUEUES": {queue: {"deadline": 0.5}}}):
        worker = Worker(worker_config(queue, burst=True, maintenance=True))
        asyncio.run(asyncio.wait_for(worker.run(), 60))

    info = ops.get_job(ref.id)
    assert (info.state, info.errors[0]["type"]) == ("failed", "awa_django.deadline_expired")
    # The handler returned after the rescue: its close found the attempt
    # closed, and its row and follow-up went with the rollback.
    assert (worker.completer.applied, worker.completer.stale) == (0, 1)
    assert rows(ref.id) == []
    assert follow_ups(queue) == []


@worker_test
def test_a_cancelled_running_attempt_rolls_back_its_completion(queue, clean, start_worker):
    ref = jobs.atomic_gated.using(queue=queue).enqueue()
    worker = start_worker("--queue", queue, "--no-maintenance")
    # Progress is written by the worker on its own connection: the attempt runs.
    wait_for(lambda: ops.get_job(ref.id).progress)
    assert rows(ref.id) == []  # its "started" row is not committed yet

    ops.cancel_job(ref.id)
    release(ref.id)  # the handler now returns normally, after the cancel
    # A graceful stop lets the in-flight handler finish (and try to commit).
    worker.terminate()
    assert worker.wait(timeout=60) == 0

    assert ops.get_job(ref.id).state == "cancelled"
    assert rows(ref.id) == []
    assert follow_ups(queue) == []
    assert f"job {ref.id}: stale completion rejected" in worker.output()


@worker_test
def test_kill_9_during_the_handler_commits_nothing_and_the_rescue_reruns_it(
    queue, clean, start_worker
):
    ref = jobs.atomic_gated.using(queue=queue).enqueue()
    env = {"AWA_SETTINGS_JSON": json.dumps(FAST)}
    doomed = start_worker("--queue", queue, "--no-maintenance", env=env)
    wait_for(lambda: ops.get_job(ref.id).progress)
    assert rows(ref.id) == []
    doomed.proc.kill()  # SIGKILL inside the transaction: PostgreSQL rolls it back
    doomed.wait(timeout=10)
    release(ref.id)

    rescuer = start_worker("--queue", queue, env=env)
    wait_for(lambda: ops.get_job(ref.id).state == "completed", timeout=60)
    rescuer.terminate()
    assert rescuer.wait(timeout=30) == 0

    info = ops.get_job(ref.id)
    assert info.attempt == 2
    assert info.errors[0]["type"] == "awa_django.stale_heartbeat"
    # Nothing of the killed attempt (run_lease 1) ever committed.
    assert rows(ref.id) == [("started", 2), ("finished", 2)]
    assert follow_ups(queue) == [["after gated"]]


# --- the test kit, and the documentation's example ---------------------------------------


@pytest.mark.django_db
def test_drain_runs_an_atomic_handler_in_a_savepoint(queue):
    ok = jobs.atomic_record.using(queue=queue).enqueue()
    bad = jobs.atomic_record.using(queue=queue, max_attempts=1).enqueue(failures=1)

    counts = drain(queue)

    assert (counts["completed"], counts["failed"]) == (1, 1)
    assert rows(ok.id) == [("atomic", 1)]
    assert rows(bad.id) == []
    assert [j.args for j in enqueued_jobs(queue=f"{queue}{jobs.FOLLOW_UP}")] == [["after run 1"]]


@worker_test
def test_the_documented_activation_commits_with_its_email_or_not_at_all(clean):
    ready = User.objects.create_user("ada", "ada@example.com", is_active=False)
    early = User.objects.create_user("bob", "", is_active=False)
    first = atomic_handlers.activate_account.using(max_attempts=1).enqueue(ready.pk)
    second = atomic_handlers.activate_account.using(max_attempts=1).enqueue(early.pk)
    run_burst("accounts")

    assert ops.get_job(first.id).state == "completed"
    assert ops.get_job(second.id).state == "failed"
    ready.refresh_from_db()
    early.refresh_from_db()
    assert (ready.is_active, early.is_active) == (True, False)
    emails = [j.args for j in ops.list_jobs(queue="email", kind=None, limit=10)]
    assert emails == [[ready.pk]]
