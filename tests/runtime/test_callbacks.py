"""Leases and external callbacks through real worker processes.

The callback matrix: parking frees the slot, every resolution, timeouts,
stale and unknown ids, sequential waits, cancellation of parked and running
attempts.  Workers run as OS processes (``awa_worker``) against the test
database; the test drives them only through the public API.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from testapp import jobs, tasks
from testapp.models import Execution

from awa_django import CallbackNotFound, JobNotFound, ops
from awa_django.domain import sealing
from awa_django.tasks import TaskResultStatus, result_of
from tests.conftest import run_burst, wait_for
from tests.runtime.test_encryption import where_found

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "HEARTBEAT_INTERVAL": 0.5,
    "HEARTBEAT_STALENESS": 1.5,
    "HEARTBEAT_RESCUE_INTERVAL": 0.2,
    "CALLBACK_RESCUE_INTERVAL": 0.2,
}


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def worker(start_worker, queue):
    """One worker process on ``queue`` with a single slot, fast heartbeats and rescue."""

    def start(slots: int = 1, **settings):
        env = {"AWA_SETTINGS_JSON": json.dumps({**FAST, **settings})}
        return start_worker("--queue", f"{queue}:{slots}", env=env)

    return start


def state(job_id: int) -> str | None:
    info = ops.get_job(job_id)
    return info.state if info else None


def parked(job_id: int) -> uuid.UUID:
    """Wait until the job waits for its callback; returns the callback id."""

    def ready():
        info = ops.get_job(job_id)
        return info.callback_id if info and info.state == "waiting_external" else None

    return wait_for(ready, timeout=30)


def waiting(job_id: int) -> uuid.UUID:
    """Wait until a handler blocks in a sequential wait (the job shows
    waiting_external, the spec's state for it); returns the callback's id."""

    def ready():
        info = ops.get_job(job_id)
        return info.callback_id if info and info.state == "waiting_external" else None

    return wait_for(ready, timeout=30)


def labels(job_id: int) -> list[str]:
    return list(
        Execution.objects.filter(job_id=job_id).order_by("id").values_list("label", flat=True)
    )


def test_a_parked_job_frees_its_slot_and_completes_by_callback(worker, queue):
    ref = jobs.park.using(queue=queue).enqueue()
    other = jobs.plain.using(queue=queue).enqueue(1, b=2)
    worker(slots=1)
    callback_id = parked(ref.id)
    # The only slot is free again: the second job runs while the first waits.
    wait_for(lambda: state(other.id) == "completed")
    assert ops.get_job(ref.id).progress["message"] == "parked"

    ops.complete_external(callback_id, {"answer": 42})
    info = ops.get_job(ref.id)
    assert (info.state, info.return_value, info.progress) == ("completed", {"answer": 42}, None)
    with pytest.raises(CallbackNotFound):
        ops.complete_external(callback_id, {"again": True})  # double completion
    counts = ops.queue_counts(queue)
    assert counts["completed"] == 2 and counts["waiting_external"] == 0


def test_fail_and_retry_external(worker, queue):
    failing = jobs.park.using(queue=queue).enqueue()
    retried = jobs.park.using(queue=queue).enqueue()
    worker(slots=2)
    fail_id, retry_id = parked(failing.id), parked(retried.id)

    ops.fail_external(fail_id, "the payment provider said no")
    info = ops.get_job(failing.id)
    assert info.state == "failed"
    assert info.errors[-1]["type"] == "awa_django.callback_failed"
    assert "said no" in info.errors[-1]["message"]

    ops.retry_external(retry_id)
    # Run again as a new attempt, which parks again with a new callback.
    second = wait_for(
        lambda: (i := ops.get_job(retried.id)) and i.attempt == 2 and i.callback_id and i
    )
    assert second.callback_id != retry_id
    with pytest.raises(CallbackNotFound):
        ops.retry_external(retry_id)  # the first attempt's id is stale


def test_retry_at_the_last_attempt_runs_the_job_again(worker, queue):
    """``retry`` is a new attempt even past ``max_attempts`` (the callback
    docs' promise): it used to come back counted past the limit and be
    failed without running, like a counted orphan hand-back."""
    ref = jobs.park.using(queue=queue, max_attempts=1).enqueue()
    worker()
    first = parked(ref.id)

    ops.retry_external(first)
    second = wait_for(
        lambda: (
            (i := ops.get_job(ref.id)) and i.state == "waiting_external" and i.attempt == 2 and i
        )
    )
    assert second.callback_id != first
    assert sorted(Execution.objects.filter(job_id=ref.id).values_list("attempt", flat=True)) == [
        1,
        2,
    ]
    ops.complete_external(second.callback_id)
    assert state(ref.id) == "completed"


def test_unknown_and_malformed_callback_ids():
    with pytest.raises(CallbackNotFound):
        ops.complete_external(uuid.uuid4())
    with pytest.raises(CallbackNotFound):
        ops.resume_external("not-a-uuid")


def test_callback_timeout_retries_then_exhausts(worker, queue):
    ref = jobs.park.using(queue=queue, max_attempts=2).enqueue(timeout=0.3)
    worker(slots=1)
    # Two attempts, each parked for 0.3 s and timed out by the leader.
    wait_for(lambda: state(ref.id) == "failed", timeout=30)
    info = ops.get_job(ref.id)
    assert info.attempt == 2
    assert [e["type"] for e in info.errors] == ["awa_django.callback_timeout"] * 2
    assert labels(ref.id) == ["parked", "parked"]


def test_callback_timeout_goes_to_the_dlq_when_the_queue_has_one(worker, queue):
    ref = jobs.park.using(queue=queue, max_attempts=1).enqueue(timeout=0.3)
    worker(slots=1, QUEUE_DLQ={queue: True})
    wait_for(lambda: state(ref.id) == "dlq", timeout=30)


def test_two_sequential_callbacks_in_one_handler(worker, queue):
    ref = jobs.sequential.using(queue=queue).enqueue(rounds=2)
    worker(slots=1)
    first = waiting(ref.id)
    ops.resume_external(first, {"n": 1})
    with pytest.raises(CallbackNotFound):
        ops.resume_external(first, {"n": "again"})
    second = wait_for(
        lambda: (i := ops.get_job(ref.id)) and i.callback_id != first and i.callback_id
    )
    ops.resume_external(second, {"n": 2})
    wait_for(lambda: state(ref.id) == "completed")
    assert ops.get_job(ref.id).return_value == [{"n": 1}, {"n": 2}]


def shown(job_id: int, queue: str) -> tuple[str, str, int, int]:
    """The job's state as get_job, the Tasks backend and queue_counts show it:
    (state, Tasks status, running count, waiting_external count)."""
    info = ops.get_job(job_id)
    counts = ops.queue_counts(queue)
    # A Django task cannot block on a callback (it has no awa JobContext), so
    # the backend's mapping is read over this job's live info.
    status = result_of(info, tasks.add).status
    return info.state, status, counts["running"], counts["waiting_external"]


def test_a_sequential_wait_shows_waiting_external_until_the_resume(worker, queue):
    superuser = Client()
    superuser.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    ref = jobs.wait_then_gate.using(queue=queue).enqueue()
    worker(slots=1)
    callback_id = waiting(ref.id)
    assert shown(ref.id, queue) == ("waiting_external", TaskResultStatus.RUNNING, 0, 1)
    assert [j.id for j in ops.list_jobs(queue=queue, state="waiting_external")] == [ref.id]
    listed = superuser.get(
        reverse("admin:awa_django_job_changelist") + f"?queue={queue}&state=waiting_external"
    ).content.decode()
    assert f"/{ref.id}/" in listed
    detail = superuser.get(reverse("admin:awa_django_job_change", args=[ref.id]))
    assert "waiting_external" in detail.content.decode()

    # resume_external hands the payload over: the same attempt runs on.
    ops.resume_external(callback_id, {"answer": 42})
    wait_for(lambda: "resumed" in labels(ref.id))
    assert shown(ref.id, queue) == ("running", TaskResultStatus.RUNNING, 1, 0)
    info = ops.get_job(ref.id)
    assert (info.attempt, info.callback_id) == (1, None)
    Execution.objects.create(job_id=ref.id, label=jobs.RELEASE, attempt=0, run_lease=0)
    wait_for(lambda: state(ref.id) == "completed")
    assert ops.get_job(ref.id).return_value == {"answer": 42}


def test_a_sequential_wait_that_times_out_shows_running_again(worker, queue):
    ref = jobs.wait_then_gate.using(queue=queue).enqueue(wait=3.0)
    worker(slots=1)
    callback_id = waiting(ref.id)
    wait_for(lambda: "timed out" in labels(ref.id))
    # The handler went on without the payload: running, the callback still open.
    assert shown(ref.id, queue) == ("running", TaskResultStatus.RUNNING, 1, 0)
    assert ops.get_job(ref.id).callback_id == callback_id
    Execution.objects.create(job_id=ref.id, label=jobs.RELEASE, attempt=0, run_lease=0)
    wait_for(lambda: state(ref.id) == "completed")


def test_an_async_sequential_wait(worker, queue):
    ref = jobs.sequential_async.using(queue=queue).enqueue()
    worker(slots=1)
    ops.resume_external(waiting(ref.id), "hello")
    wait_for(lambda: state(ref.id) == "completed")
    assert ops.get_job(ref.id).return_value == "hello"


def test_an_async_handler_parks(worker, queue):
    ref = jobs.park_async.using(queue=queue).enqueue()
    worker(slots=1)
    ops.complete_external(parked(ref.id), None)
    assert state(ref.id) == "completed"


def test_cancel_while_waiting(worker, queue):
    ref = jobs.park.using(queue=queue).enqueue()
    worker(slots=1)
    callback_id = parked(ref.id)
    assert ops.cancel_job(ref.id) is True
    assert state(ref.id) == "cancelled"
    with pytest.raises(CallbackNotFound):
        ops.complete_external(callback_id)
    assert ops.cancel_job(ref.id) is False  # already cancelled: says so, changes nothing


def test_cancel_of_a_running_job_is_seen_by_its_handler(worker, queue):
    ref = jobs.until_cancelled.using(queue=queue).enqueue()
    worker(slots=1)
    wait_for(lambda: "started" in labels(ref.id))
    cancelled_at = time.monotonic()
    assert ops.cancel_job(ref.id) is True
    assert state(ref.id) == "cancelled"
    wait_for(lambda: "noticed" in labels(ref.id), timeout=10)
    noticed_after = time.monotonic() - cancelled_at
    print(f"cancel -> ctx.is_cancelled() observed within {noticed_after * 1000:.0f} ms")
    # The handler returned normally afterwards; its completion was stale.
    assert state(ref.id) == "cancelled"


def test_a_heartbeating_job_outlives_the_staleness_window(worker, queue):
    ref = jobs.until_cancelled.using(queue=queue).enqueue(heartbeat=True)
    worker(slots=1)
    wait_for(lambda: "started" in labels(ref.id))
    time.sleep(FAST["HEARTBEAT_STALENESS"] * 2)  # the window itself is what is tested
    assert state(ref.id) == "running"
    ops.cancel_job(ref.id)
    wait_for(lambda: "noticed" in labels(ref.id), timeout=10)


def test_cancel_of_available_and_scheduled_jobs(queue):
    import datetime as dt

    available = jobs.plain.using(queue=queue).enqueue(1)
    later = jobs.plain.using(
        queue=queue, run_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    ).enqueue(2)
    assert ops.cancel_job(available.id) is True
    assert ops.cancel_job(later.id) is True
    assert state(available.id) == state(later.id) == "cancelled"
    assert ops.get_job(available.id).args == [1] and ops.get_job(later.id).args == [2]
    counts = ops.queue_counts(queue)
    assert counts["cancelled"] == 2 and counts["available"] == 0 and counts["scheduled"] == 0
    with pytest.raises(JobNotFound):
        ops.cancel_job(10**15)


@pytest.mark.needs_session
def test_cancel_reaches_the_handler_over_notify_within_a_heartbeat_interval(worker, queue):
    ref = jobs.until_cancelled.using(queue=queue).enqueue()
    worker(slots=1, HEARTBEAT_INTERVAL=30, HEARTBEAT_STALENESS=90)
    wait_for(lambda: "started" in labels(ref.id))
    cancelled_at = time.monotonic()
    assert ops.cancel_job(ref.id) is True
    # Far inside one 30 s heartbeat interval: the NOTIFY path did it.
    wait_for(lambda: "noticed" in labels(ref.id), timeout=10)
    elapsed_ms = (time.monotonic() - cancelled_at) * 1000
    print(f"cancel -> ctx.is_cancelled() over NOTIFY: {elapsed_ms:.0f} ms")


@pytest.mark.needs_session  # the cancel arrives by NOTIFY before the handler parks
def test_a_callback_racing_a_still_running_handler(worker, queue):
    ref = jobs.register_then_gate.using(queue=queue).enqueue()
    worker(slots=1)
    wait_for(lambda: "registered" in labels(ref.id))
    callback_id = ops.get_job(ref.id).callback_id
    assert callback_id is not None and state(ref.id) == "running"
    # The answer comes before the handler parked: the job completes now ...
    ops.complete_external(callback_id, "early")
    assert (state(ref.id), ops.get_job(ref.id).return_value) == ("completed", "early")
    # ... and the handler, told so, parks nothing when it gets there.
    Execution.objects.create(job_id=ref.id, label=jobs.RELEASE, attempt=0, run_lease=0)
    wait_for(lambda: "cancelled=True" in labels(ref.id))
    other = jobs.plain.using(queue=queue).enqueue(1)
    wait_for(lambda: state(other.id) == "completed")
    assert (state(ref.id), ops.get_job(ref.id).return_value) == ("completed", "early")


def test_progress_of_a_leased_attempt_is_visible_and_survives_a_retry(worker, queue):
    ref = jobs.long_progress.using(queue=queue).enqueue()
    worker(slots=1)
    wait_for(lambda: "reported" in labels(ref.id))
    wait_for(lambda: (ops.get_job(ref.id).progress or {}).get("percent") == 40)
    Execution.objects.create(job_id=ref.id, label=jobs.RELEASE, attempt=0, run_lease=0)
    wait_for(lambda: state(ref.id) == "completed", timeout=60)
    assert ops.get_job(ref.id).return_value == "resumed at step 2"


def test_a_killed_workers_leased_attempt_is_rescued(start_worker, queue):
    env = {"AWA_SETTINGS_JSON": json.dumps(FAST)}
    victim = start_worker("--queue", f"{queue}:1", "--no-maintenance", env=env)
    ref = jobs.until_cancelled.using(queue=queue).enqueue(heartbeat=True, timeout=60)
    wait_for(lambda: "started" in labels(ref.id))
    victim.kill()
    # Another process leads maintenance and rescues the lease; a new worker runs it again.
    start_worker("--queue", f"{queue}:1", env=env)
    wait_for(lambda: labels(ref.id).count("started") == 2, timeout=30)
    info = ops.get_job(ref.id)
    assert info.state == "running" and info.attempt == 2
    assert info.errors[-1]["type"] == "awa_django.stale_heartbeat"
    ops.cancel_job(ref.id)


def test_cancelling_available_jobs_writes_no_update_or_delete_on_hot_tables(queue, raw_conn):
    from django.db import connection

    refs = [jobs.plain.using(queue=queue).enqueue(n) for n in range(5)]

    def writes() -> tuple[int, int, int]:
        # A backend flushes its table statistics when it exits: close the
        # connection that did the work, then read the shared counters.
        connection.close()
        raw_conn.execute("SELECT pg_stat_clear_snapshot()")
        row = raw_conn.execute(
            "SELECT COALESCE(sum(n_tup_ins), 0), COALESCE(sum(n_tup_upd), 0),"
            "       COALESCE(sum(n_tup_del), 0)"
            "  FROM pg_stat_user_tables WHERE schemaname = 'awa'"
            "   AND (relname LIKE 'ready\\_%' OR relname LIKE 'done\\_%')"
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    inserted, updated, deleted = writes()
    for ref in refs:
        assert ops.cancel_job(ref.id) is True
    after = wait_for(lambda: (w := writes())[0] >= inserted + 10 and w)
    # Tombstones and terminal rows were appended (10 rows); nothing changed in place.
    assert after[1:] == (updated, deleted)
    assert [state(r.id) for r in refs] == ["cancelled"] * 5
    # And they never run: a worker finds nothing to do.
    worker = run_burst(queue)
    assert worker.completed == 0
    assert [state(r.id) for r in refs] == ["cancelled"] * 5


def test_retry_job_runs_a_failed_or_cancelled_job_again(worker, queue):
    failed = jobs.terminal.using(queue=queue, max_attempts=3).enqueue()
    cancelled = jobs.plain.using(queue=queue).enqueue(20, b=22)
    assert ops.cancel_job(cancelled.id) is True
    worker(slots=2)
    wait_for(lambda: state(failed.id) == "failed")
    before = ops.get_job(failed.id)
    counts = ops.queue_counts(queue)
    assert (counts["failed"], counts["cancelled"]) == (1, 1)

    assert ops.retry_job(cancelled.id) is True
    assert ops.retry_job(cancelled.id) is False  # already queued again
    wait_for(lambda: state(cancelled.id) == "completed")
    assert ops.get_job(cancelled.id).return_value == 42

    assert ops.retry_job(failed.id) is True
    wait_for(
        lambda: (i := ops.get_job(failed.id)).state == "failed" and i.run_lease > before.run_lease
    )
    after = ops.get_job(failed.id)
    assert after.attempt == 1 and len(after.errors) == len(before.errors) + 1
    counts = ops.queue_counts(queue)
    assert (counts["failed"], counts["cancelled"], counts["completed"]) == (1, 0, 1)
    assert ops.retry_job(cancelled.id) is False  # completed: nothing to retry
    with pytest.raises(JobNotFound):
        ops.retry_job(10**15)


@pytest.mark.parametrize("long_running", [True, False])
def test_a_long_running_queue_leases_each_attempt_from_its_start(queue, long_running):
    """The lease is built on first use; a ``long_running`` queue uses it
    before the handler runs (other queues only when the handler escalates)."""
    ref = jobs.lease_state.using(queue=queue).enqueue()
    run_burst(queue, long_running=long_running)
    info = ops.get_job(ref.id)
    assert info.state == "completed"
    assert info.return_value is long_running


def test_what_arrives_for_an_encrypted_job_is_sealed_too(worker, queue):
    """complete, resume and fail of an encrypted job's callbacks: the payload
    or error is stored sealed (and kept out of the audit log), the waiting
    handler receives it opened."""
    secret = f"frank+{uuid.uuid4().hex}@example.org"
    sequential = jobs.sequential_async.using(queue=queue, encrypt=True).enqueue()
    completed = jobs.park.using(queue=queue, encrypt=True).enqueue()
    failed = jobs.park.using(queue=queue, encrypt=True, max_attempts=1).enqueue()
    worker(slots=3)
    ops.resume_external(waiting(sequential.id), {"to": secret}, actor="ops@example.org")
    ops.complete_external(parked(completed.id), {"to": secret}, actor="ops@example.org")
    ops.fail_external(parked(failed.id), f"bounced: {secret}", actor="ops@example.org")
    wait_for(
        lambda: (
            [state(r.id) for r in (sequential, completed, failed)]
            == ["completed", "completed", "failed"]
        )
    )
    assert where_found(secret) == []
    opened = [sealing.open_info(ops.get_job(r.id)) for r in (sequential, completed, failed)]
    assert opened[0].return_value == {"to": secret}  # the handler got it opened
    assert opened[1].return_value == {"to": secret}
    assert opened[2].errors[-1]["message"] == f"bounced: {secret}"
    audited = [e for e in ops.audit_log(limit=20) if e.action == "fail_external"]
    assert [e.detail for e in audited] == [{"error": "<sealed>"}]
