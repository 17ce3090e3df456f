"""Dead-letter queue operations against real workers and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from testapp import jobs
from testapp.models import Execution

from awa_django import InvalidJob, JobNotFound, ops
from awa_django.storage import maintenance
from awa_django.storage.base import run
from tests.conftest import run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def dead_letter(queue: str, count: int = 1, kind=jobs.fails_until_released) -> list[int]:
    """``count`` jobs of ``queue`` that failed into its DLQ."""
    refs = [kind.using(queue=queue).enqueue() for _ in range(count)]
    with override_settings(AWA={"QUEUE_DLQ": {queue: True}}):
        run_burst(queue)
    assert {ops.get_job(r.id).state for r in refs} == {"dlq"}
    return [r.id for r in refs]


def release(job_id: int) -> None:
    Execution.objects.create(job_id=job_id, label=jobs.RELEASE, attempt=0, run_lease=0)


def test_round_trip_fail_dlq_retry_complete(queue):
    (job_id,) = dead_letter(queue)
    (entry,) = ops.dlq_list(queue=queue)
    assert (entry.job_id, entry.kind, entry.reason) == (
        job_id,
        "testapp.fails_until_released",
        "terminal error",
    )
    assert entry.errors[-1]["message"] == "not fixed yet" and entry.errors[-1]["traceback"]
    assert entry.moved_at is not None and entry.attempt == 1
    assert ops.queue_counts(queue)["dlq"] == 1

    release(job_id)
    ops.dlq_retry(job_id)
    assert ops.dlq_list(queue=queue) == []
    run_burst(queue)
    info = ops.get_job(job_id)
    assert (info.state, info.attempt, info.run_lease) == ("completed", 1, 1)
    assert info.return_value == "fixed on attempt 1"
    assert len(info.errors) == 1  # the history survives the DLQ round trip
    with pytest.raises(JobNotFound):
        ops.dlq_retry(job_id)


def test_retry_to_another_queue_and_priority_and_purge(queue):
    first, second = dead_letter(queue, 2)
    other = f"{queue}-other"
    release(first)
    ops.dlq_retry(first, queue=other, priority=1)
    info = ops.get_job(first)
    assert (info.queue, info.priority) == (other, 1)
    run_burst(other)
    assert ops.get_job(first).state == "completed"

    ops.dlq_purge(second)
    assert ops.get_job(second) is None
    with pytest.raises(JobNotFound):
        ops.dlq_purge(second)
    assert ops.queue_counts(queue)["dlq"] == 0


def test_bulk_retry_and_purge_by_filter_in_batches(queue):
    ids = dead_letter(queue, 7)
    other_kind = dead_letter(queue, 2, kind=jobs.terminal)
    assert ops.dlq_purge_all(queue=queue, kind="testapp.terminal", batch_size=1) == 2
    assert {e.job_id for e in ops.dlq_list(queue=queue)} == set(ids)
    assert all(ops.get_job(i) is None for i in other_kind)

    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    assert ops.dlq_retry_all(queue=queue, moved_before=later, batch_size=3) == 7
    assert ops.dlq_list(queue=queue) == []
    assert {ops.get_job(i).state for i in ids} == {"available"}
    earlier = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    assert ops.dlq_retry_all(queue=queue, moved_before=earlier) == 0


@pytest.mark.needs_session
def test_a_retry_is_available_at_once_and_wakes_an_idle_worker(queue, start_worker):
    """No leader and no promotion: the retried job is ready as the call
    returns, and the NOTIFY of its placement wakes a worker whose poll
    interval is far longer than the test waits."""
    first, second = dead_letter(queue, 2)
    release(first)
    release(second)
    ops.dlq_retry(first)  # no worker, no maintenance anywhere
    info = ops.get_job(first)
    assert (info.state, info.attempt, info.run_lease) == ("available", 0, 0)
    counts = ops.queue_counts(queue)
    assert (counts["available"], counts["retryable"], counts["dlq"]) == (1, 0, 1)

    env = {"AWA_SETTINGS_JSON": json.dumps({"QUEUES": {queue: {"poll_interval": 600}}})}
    start_worker("--queue", f"{queue}:1", "--no-maintenance", env=env)
    wait_for(lambda: ops.get_job(first).state == "completed")  # claimed at start-up
    info = ops.get_job(first)
    assert (info.attempt, info.run_lease, info.return_value) == (1, 1, "fixed on attempt 1")

    ops.dlq_retry(second)  # the worker is idle now: only the NOTIFY can wake it in time
    wait_for(lambda: ops.get_job(second).state == "completed", timeout=30)


def test_a_retry_with_a_run_at(queue):
    later, earlier = dead_letter(queue, 2)
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    ops.dlq_retry(later, run_at=at)
    info = ops.get_job(later)
    assert (info.state, info.run_at, info.attempt, info.run_lease) == ("scheduled", at, 0, 0)
    ops.dlq_retry(earlier, run_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
    assert ops.get_job(earlier).state == "available"
    counts = ops.queue_counts(queue)
    assert (counts["scheduled"], counts["available"], counts["dlq"]) == (1, 1, 0)
    with pytest.raises(InvalidJob):
        ops.dlq_retry(later, run_at=dt.datetime(2030, 1, 1))  # naive: refused


def test_a_bulk_retry_with_a_run_at_schedules_every_job(queue):
    ids = dead_letter(queue, 3)
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert ops.dlq_retry_all(queue=queue, run_at=at, batch_size=2) == 3
    assert {(ops.get_job(i).state, ops.get_job(i).run_at) for i in ids} == {("scheduled", at)}


def test_move_failed_to_dlq(queue):
    ref = jobs.terminal.using(queue=queue).enqueue()
    run_burst(queue)
    assert ops.get_job(ref.id).state == "failed"
    assert ops.move_failed_to_dlq(ref.id) is True
    assert ops.get_job(ref.id).state == "dlq"
    counts = ops.queue_counts(queue)
    assert (counts["failed"], counts["dlq"]) == (0, 1)
    assert ops.move_failed_to_dlq(ref.id) is False
    (entry,) = ops.dlq_list(queue=queue)
    assert entry.reason == "moved by an operator"
    # Retried from the DLQ, the job runs again from attempt 1 and fails again.
    ops.dlq_retry(ref.id)
    run_burst(queue)
    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("failed", 1)
    assert ops.queue_counts(queue)["failed"] == 1
    with pytest.raises(JobNotFound):
        ops.move_failed_to_dlq(10**15)


def test_retention_cleanup_removes_old_entries_in_bounded_batches(queue, raw_conn):
    ids = dead_letter(queue, 3)
    raw_conn.execute(
        "UPDATE awa.dlq_entries SET moved_at = now() - interval '40 days' WHERE job_id = ANY(%s)",
        [ids[:2]],
    )
    removed = run(maintenance.cleanup(runtime_retention=3600, dlq_retention=30 * 86400, limit=1))
    assert removed >= 1
    assert len(ops.dlq_list(queue=queue)) == 2  # one batch of one
    run(maintenance.cleanup(runtime_retention=3600, dlq_retention=30 * 86400, limit=100))
    assert [e.job_id for e in ops.dlq_list(queue=queue)] == [ids[2]]


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("awa_dlq", *args, stdout=out)
    return out.getvalue()


def test_the_awa_dlq_command(queue, monkeypatch):
    ids = dead_letter(queue, 3)
    listed = json.loads(command("list", "--queue", queue, "--json"))
    assert sorted(e["job_id"] for e in listed) == sorted(ids)
    assert "not fixed yet" in command("list", "--queue", queue)

    assert "retry done" in command("retry", str(ids[0]))
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    with pytest.raises(CommandError, match="nothing changed"):
        command("purge", "--all", "--queue", queue)
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    assert "purge: 2 job(s)" in command("purge", "--all", "--queue", queue)
    assert ops.dlq_list(queue=queue) == []
    with pytest.raises(CommandError, match="one job id, or --all"):
        command("retry")
    with pytest.raises(CommandError, match="not in the dead-letter queue"):
        command("purge", str(ids[0]))
