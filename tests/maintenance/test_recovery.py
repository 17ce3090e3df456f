"""Crash recovery, deadlines, leader failover and a pinned MVCC horizon."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import psycopg
import pytest
from django.test import override_settings
from testapp import jobs
from testapp.models import Execution

import awa_django
from awa_django import ops
from awa_django.runtime.process.worker import Worker
from awa_django.storage import SyncRunner, maintenance
from awa_django.storage.connection import conninfo
from tests.conftest import ROOT, database_url, wait_for, worker_config

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "HEARTBEAT_INTERVAL": 0.3,
    "HEARTBEAT_STALENESS": 1.5,
    "HEARTBEAT_RESCUE_INTERVAL": 0.3,
    "DEADLINE_RESCUE_INTERVAL": 0.2,
    "PROMOTE_INTERVAL": 0.1,
    "QUEUE_ROTATE_INTERVAL": 0.1,
    "CLAIM_ROTATE_INTERVAL": 0.1,
    "LEASE_ROTATE_INTERVAL": 0.1,
}


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def _leader(conn) -> int | None:
    """pid of the process whose election session holds the leader lock."""
    found = SyncRunner(conn)(maintenance.leader())
    return int(found[0].split()[1]) if found else None


def test_kill_9_mid_batch_rescues_and_completes_every_job(queue, start_worker):
    ids = awa_django.enqueue_many(
        [jobs.crashable.using(queue=queue).prepare(30.0) for _ in range(12)]
    )
    env = {"AWA_SETTINGS_JSON": json.dumps(FAST)}
    doomed = start_worker("--queue", f"{queue}:12", "--no-maintenance", env=env)
    wait_for(lambda: Execution.objects.filter(label="started").count() == 12)
    doomed.proc.kill()  # SIGKILL: no shutdown, receipts stay open
    doomed.wait(timeout=10)

    rescuer = start_worker("--queue", f"{queue}:8", env=env)
    wait_for(lambda: all(ops.get_job(i).state == "completed" for i in ids), timeout=60)
    rescuer.terminate()
    assert rescuer.wait(timeout=30) == 0

    for job_id in ids:
        info = ops.get_job(job_id)
        runs = list(
            Execution.objects.filter(job_id=job_id, label="started")
            .order_by("attempt")
            .values_list("attempt", flat=True)
        )
        # At most one run per attempt, and exactly one finished run.
        assert len(runs) == len(set(runs)), (job_id, runs)
        assert Execution.objects.filter(job_id=job_id, label="finished").count() == 1
        # Every job was mid-flight in the killed worker: rescued, then run again.
        assert runs == [1, 2]
        assert info.attempt == 2
        assert info.errors[0]["type"] == "awa_django.stale_heartbeat"


def test_deadline_rescue_closes_the_attempt_and_the_handler_is_told(queue):
    ref = jobs.overrun.using(queue=queue, max_attempts=1).enqueue(30.0)
    with override_settings(AWA={**FAST, "QUEUES": {queue: {"deadline": 0.5}}}):
        worker = Worker(worker_config(queue, burst=True, maintenance=True))
        asyncio.run(asyncio.wait_for(worker.run(), 60))

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("failed", 1)
    assert info.errors[0]["type"] == "awa_django.deadline_expired"
    # The handler's own completion arrived after the rescue and was rejected.
    assert worker.completer.stale == 1
    assert list(Execution.objects.values_list("label", flat=True)) == ["cancelled=True"]


def _candidates(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name LIKE 'awa-maintenance %%' AND datname = current_database()"
    ).fetchone()[0]


@pytest.mark.needs_session  # the lock election; the lease's failover: tests/pooler
def test_leader_failover():
    env = dict(os.environ, DATABASE_URL=database_url(), AWA_SETTINGS_JSON=json.dumps(FAST))
    command = [sys.executable, str(ROOT / "testproject" / "manage.py"), "awa_maintenance"]
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:
        with psycopg.connect(conninfo(), autocommit=True) as conn:
            wait_for(lambda: _candidates(conn) == 2)  # both are up and competing
            first = wait_for(lambda: _leader(conn))
            assert first in {p.pid for p in procs}
            os.kill(first, signal.SIGKILL)
            killed_at = time.monotonic()
            second = wait_for(lambda: (pid := _leader(conn)) and pid != first and pid)
            failover = time.monotonic() - killed_at
        assert second in {p.pid for p in procs} - {first}
        # Documented bound: one election interval (1 s) after the session ends.
        assert failover < 5, failover
        survivor = next(p for p in procs if p.pid == second)
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=30) == 0  # clean shutdown on SIGTERM
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def _truncations(conn) -> dict[str, int]:
    return dict(
        conn.execute("SELECT ring, truncations FROM awa.ring_status WHERE action = 'prune'")
    )


def _came_round(conn, ring: str) -> bool:
    """Whether ``ring`` rotated onto its last slot or further: prune's target
    (the slot after the current one) is then a slot it sealed, not one still
    unused."""
    row = conn.execute(
        "SELECT s.rotations >= c.slot_count - 1 FROM awa.ring_status s"
        " JOIN awa.ring_config c USING (ring) WHERE s.ring = %s AND s.action = 'rotate'",
        [ring],
    ).fetchone()
    return bool(row and row[0])


def test_pinned_horizon_loses_nothing_and_pruning_resumes(queue):
    with (
        psycopg.connect(conninfo(), autocommit=True) as observer,
        psycopg.connect(conninfo()) as pinned,
    ):
        pinned.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pinned.execute("SELECT txid_current()")  # holds back the MVCC horizon
        before = _truncations(observer)
        # Until both rings came round: every slot prune may target was sealed
        # after the pin.
        with override_settings(AWA=FAST):
            produced = _produce_and_drain(
                queue,
                per_batch=100,
                until=lambda: _came_round(observer, "queue") and _came_round(observer, "claim"),
            )
        assert ops.queue_counts(queue)["completed"] == produced
        during = _truncations(observer)
        # Nothing sealed after the pin could be truncated.
        assert during.get("queue", 0) == before.get("queue", 0)
        pinned.rollback()

        def pruned_again() -> bool:
            after = _truncations(observer)
            return all(after.get(ring, 0) > during.get(ring, 0) for ring in ("queue", "claim"))

        with override_settings(AWA=FAST):
            produced += _produce_and_drain(queue, per_batch=20, until=pruned_again)
        assert pruned_again()
    assert ops.queue_counts(queue)["completed"] == produced


def _produce_and_drain(queue: str, *, per_batch: int, until: Callable[[], bool]) -> int:
    """Run a worker (with maintenance) while batches of jobs keep coming,
    until ``until()`` holds; returns how many jobs it ran.

    After each batch the leader's tasks run once, so each batch is sealed in
    a slot of its own (a rotation skips an empty slot) whatever the task
    loops' ticks do: on a loaded machine a run timed by those ticks once
    turned the queue ring too few times to come round, and prune, with no
    sealed slot to aim at, had nothing to refuse or resume."""
    from django.db import connections

    worker = Worker(
        worker_config(queue, burst=False, maintenance=True, max_workers=64, claim_batch_size=128)
    )

    def produce() -> None:
        try:
            awa_django.enqueue_many(
                [jobs.noop_async.using(queue=queue).prepare() for _ in range(per_batch)]
            )
        finally:
            connections.close_all()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        running = asyncio.create_task(worker.run())
        elected = time.monotonic() + 60
        while worker.maintenance is None or not worker.maintenance.is_leader:
            assert time.monotonic() < elected, "the worker never led maintenance"
            await asyncio.sleep(0.05)
        total = 0
        deadline = time.monotonic() + 120
        while not await loop.run_in_executor(None, until):
            assert time.monotonic() < deadline, "the rings did not get there within 120 s"
            await loop.run_in_executor(None, produce)
            total += per_batch
            await worker.maintenance.run_once()
        while worker.completed < total:
            assert time.monotonic() < deadline, f"{worker.completed} of {total} jobs ran"
            await asyncio.sleep(0.05)
        worker.request_stop()
        await running
        return total

    total = asyncio.run(main())
    assert worker.completed == total
    return total


def test_cleanup_removes_stale_runtimes(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.runtime_instances (id, hostname, pid, queues, heartbeat_at)"
            " VALUES (gen_random_uuid(), 'gone', 1, '{}', now() - interval '1 day'),"
            "        (gen_random_uuid(), 'alive', 2, '{}', now())"
        )
        assert SyncRunner(conn)(maintenance.cleanup(3600, 30 * 86400, 100)) >= 1
        hosts = [h for (h,) in conn.execute("SELECT hostname FROM awa.runtime_instances")]
    assert hosts == ["alive"]
