"""Real worker processes: multi-process drain, graceful shutdown, burst, stale completions."""

from __future__ import annotations

import asyncio
import time
import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from testapp import jobs
from testapp.models import ExactlyOnce, Execution

import awa_django
from awa_django import ops
from awa_django.runtime.closures import completed, retry_or_fail
from awa_django.runtime.completer import BatchCompleter
from awa_django.runtime.config import CompleterConfig
from awa_django.storage import AsyncRunner
from awa_django.storage.attempts import claim
from awa_django.storage.connection import conninfo
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_four_processes_drain_10000_jobs_exactly_once(queue, start_worker):
    ids = awa_django.enqueue_many([jobs.once.using(queue=queue).prepare(n) for n in range(10_000)])

    # 4 processes x 8 threads stay well inside max_connections.
    worker = start_worker("--queue", f"{queue}:8", "--processes", "4", "--burst")
    assert worker.wait(timeout=300) == 0, worker.output()[-4000:]

    assert ExactlyOnce.objects.count() == 10_000
    assert set(ExactlyOnce.objects.values_list("job_id", flat=True)) == set(ids)
    counts = ops.queue_counts(queue)
    assert counts["completed"] == 10_000
    assert counts["available"] == counts["running"] == counts["retryable"] == counts["failed"] == 0
    # No job needed a second attempt (a duplicate run would have failed on
    # the unique constraint and been retried).
    retried = [
        (info.id, info.attempt, info.errors[:1])
        for info in ops.list_jobs(queue=queue, limit=20_000)
        if info.attempt != 1 or info.errors
    ]
    assert retried == []


def test_burst_exits_zero_on_an_empty_queue(queue, start_worker):
    started = time.monotonic()
    worker = start_worker("--queue", queue, "--burst")
    assert worker.wait(timeout=60) == 0
    assert time.monotonic() - started < 30


def test_burst_is_not_held_by_future_jobs(queue, start_worker):
    later = jobs.record.using(queue=queue, run_in=3600).enqueue("later")
    now = jobs.record.using(queue=queue).enqueue("now")
    worker = start_worker("--queue", queue, "--burst")
    assert worker.wait(timeout=60) == 0
    assert ops.get_job(now.id).state == "completed"
    assert ops.get_job(later.id).state == "scheduled"


def test_sigterm_waits_for_the_in_flight_job(queue, start_worker):
    ref = jobs.sleep.using(queue=queue).enqueue(2.0, label="finished")
    worker = start_worker("--queue", queue, "--shutdown-timeout", "30")
    wait_for(lambda: Execution.objects.filter(job_id=ref.id, label="started").exists())
    assert ops.get_job(ref.id).state == "running"

    worker.terminate()
    assert worker.wait(timeout=60) == 0
    assert ops.get_job(ref.id).state == "completed"
    assert Execution.objects.filter(job_id=ref.id, label="finished").count() == 1


def test_sigterm_hands_back_what_does_not_finish_in_time(queue, start_worker):
    ref = jobs.sleep.using(queue=queue).enqueue(60.0)
    worker = start_worker("--queue", queue, "--shutdown-timeout", "0.5")
    wait_for(lambda: Execution.objects.filter(job_id=ref.id, label="started").exists())

    worker.terminate()
    assert worker.wait(timeout=30) == 0
    info = ops.get_job(ref.id)
    # Handed back uncounted: the next claim runs attempt 1 again.
    assert info.state in ("scheduled", "available")
    assert info.attempt == 0 and info.run_lease == 1 and info.errors == []


def test_a_late_completion_is_rejected_and_counted(queue):
    ref = jobs.plain.using(queue=queue).enqueue(1)

    async def scenario():
        async with AsyncConnectionPool(conninfo(), kwargs={"autocommit": True}, open=False) as pool:
            run = AsyncRunner(pool)
            [claimed] = await run(claim(queue, 10, uuid.uuid4(), 300, 60))
            completer = BatchCompleter(CompleterConfig(512, 0.001), run)
            await completer.start()
            # Someone else (rescue, an operator) closes the attempt first ...
            entry = {
                "attempt": 1,
                "type": "rescue",
                "message": "rescued",
                "traceback": "",
                "at": "",
            }
            assert await completer.submit(retry_or_fail(claimed, entry, 3600, dlq=False))
            # ... then the original handler finishes and reports success.
            late = await completer.submit(completed(claimed, 99))
            await completer.stop()
            return claimed, late, completer

    claimed, late, completer = asyncio.run(scenario())
    assert late is False
    assert (completer.applied, completer.stale) == (1, 1)
    info = ops.get_job(ref.id)
    assert (info.state, info.run_lease, info.return_value) == ("retryable", claimed.run_lease, None)
    with psycopg.connect(conninfo()) as conn:
        closures = conn.execute(
            "SELECT outcome FROM awa.lease_claim_closures WHERE job_id = %s", [ref.id]
        ).fetchall()
    assert closures == [("retryable",)]


def _runtime_pids(queue: str) -> set[int]:
    with psycopg.connect(conninfo()) as conn:
        rows = conn.execute(
            "SELECT pid FROM awa.runtime_instances WHERE %s = ANY (queues)", [queue]
        ).fetchall()
    return {pid for (pid,) in rows}


def test_supervisor_restarts_a_child_that_dies(queue, start_worker):
    import os
    import signal

    worker = start_worker("--queue", queue, "--processes", "2")
    first = wait_for(lambda: _runtime_pids(queue) if len(_runtime_pids(queue)) == 2 else None)
    victim = sorted(first)[0]
    os.kill(victim, signal.SIGKILL)

    replacement = wait_for(lambda: _runtime_pids(queue) - first, timeout=30)
    assert len(replacement) == 1
    # The survivors still work jobs.
    ref = jobs.plain.using(queue=queue).enqueue(20, b=1)
    wait_for(lambda: ops.get_job(ref.id).state == "completed")

    worker.terminate()
    assert worker.wait(timeout=60) == 0
    # Clean shutdown unregisters the live children (the killed one's row stays
    # until maintenance removes stale runtimes).
    assert _runtime_pids(queue) <= {victim}


def test_running_job_progress_is_visible(queue, start_worker):
    ref = jobs.checkpoint.using(queue=queue).enqueue(fail_first=False, hold=3.0)
    worker = start_worker("--queue", queue)
    info = wait_for(lambda: (i := ops.get_job(ref.id)).progress and i)
    assert info.state == "running"
    assert info.progress["checkpoint"] == {"done": 5}
    wait_for(lambda: ops.get_job(ref.id).state == "completed")
    worker.terminate()
    assert worker.wait(timeout=30) == 0
