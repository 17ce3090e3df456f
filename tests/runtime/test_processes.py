"""Real worker processes: multi-process drain, graceful shutdown, burst, stale completions.

Tests that must observe a job while it runs use ``jobs.gated``, which holds
until the test releases it, and wait on events (a row written, a log line),
never on a fixed hold that worker start-up could eat into.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from testapp import jobs
from testapp.models import ExactlyOnce, Execution

import awa_django
from awa_django import ops
from awa_django.domain.closures import completed, retry_or_fail
from awa_django.runtime.completion.completer import BatchCompleter
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


def release(job_id: int) -> None:
    """Let a ``jobs.gated`` job finish."""
    Execution.objects.create(job_id=job_id, label=jobs.RELEASE)


def started(job_id: int) -> bool:
    return Execution.objects.filter(job_id=job_id, label="started").exists()


class Output:
    """A worker's output, read as it is written, so a test can wait for a log line."""

    def __init__(self, worker) -> None:
        self.lines: list[str] = []
        self._stream = worker.proc.stdout
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def shows(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def text(self) -> str:
        self._reader.join(timeout=60)  # EOF: the worker has exited
        return "".join(self.lines)


def test_sigterm_waits_for_the_in_flight_job(queue, start_worker):
    ref = jobs.gated.using(queue=queue).enqueue()
    worker = start_worker(
        "--queue", queue, "--shutdown-timeout", "30", env={"AWA_LOG_LEVEL": "INFO"}
    )
    output = Output(worker)
    wait_for(lambda: started(ref.id))

    worker.terminate()
    wait_for(lambda: output.shows("for 1 in-flight jobs"))  # stopped claiming, draining
    assert ops.get_job(ref.id).state == "running"
    release(ref.id)
    log = output.text()
    assert worker.wait(timeout=60) == 0, log[-4000:]
    assert ops.get_job(ref.id).state == "completed"
    assert Execution.objects.filter(job_id=ref.id, label="finished").count() == 1


def test_sigterm_hands_back_what_does_not_finish_in_time(queue, start_worker):
    ref = jobs.gated.using(queue=queue).enqueue()  # never released
    worker = start_worker("--queue", queue, "--shutdown-timeout", "0.5")
    wait_for(lambda: started(ref.id))

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
    ref = jobs.gated.using(queue=queue).enqueue()
    worker = start_worker("--queue", queue)
    info = wait_for(lambda: (i := ops.get_job(ref.id)).progress and i)
    assert info.state == "running"
    assert info.progress == {
        "percent": 50,
        "message": "waiting for release",
        "checkpoint": {"done": 5},
    }
    release(ref.id)
    wait_for(lambda: ops.get_job(ref.id).state == "completed")
    assert ops.get_job(ref.id).progress is None  # cleared by the completion
    worker.terminate()
    assert worker.wait(timeout=30) == 0


@pytest.mark.needs_session
def test_a_connection_budget_bounds_a_workers_connections(queue, start_worker):
    """MAX_CONNECTIONS_PER_PROCESS = 9 for a worker of one claim loop with
    no maintenance: 5 pool, 1 LISTEN, 3 for the handlers.  Eight sync jobs
    that each hold a Django connection for a while all complete, the worker's
    connections never pass 9 (sampled from pg_stat_activity), and the jobs
    that found no free connection waited and said so."""
    for _ in range(8):
        jobs.sleep.using(queue=queue).enqueue(1.5)
    with psycopg.connect(conninfo(), autocommit=True) as sampler:

        def connections() -> int:
            row = sampler.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            return int(row[0]) if row else 0

        baseline = connections()  # the test's own Django connection
        worker = start_worker(
            "--queue",
            f"{queue}:8",
            "--no-maintenance",
            "--burst",
            env={"AWA_SETTINGS_JSON": json.dumps({"MAX_CONNECTIONS_PER_PROCESS": 9})},
        )
        peak = 0
        while worker.proc.poll() is None:
            peak = max(peak, connections() - baseline)
            time.sleep(0.02)
    assert worker.wait(timeout=60) == 0, worker.output()[-3000:]
    assert ops.queue_counts(queue)["completed"] == 8
    assert 3 < peak <= 9, peak
    assert "waits for a database connection" in worker.output()
