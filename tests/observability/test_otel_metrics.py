"""OpenTelemetry metrics of a job's life, recorded by a real in-process worker.

Every instrument comes from the one table (``observability.metrics``);
counters and histograms are checked against what the worker itself
counted, gauges while a job is held running and after the worker stopped.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import uuid

import pytest
from django.test import override_settings
from psycopg_pool import AsyncConnectionPool
from testapp import jobs

from awa_django import job, ops
from awa_django.observability import metrics
from awa_django.runtime.config import PeriodicConfig
from awa_django.runtime.leadership.maintenance import QueueGauges
from awa_django.runtime.process.worker import Worker
from awa_django.storage import AsyncRunner
from awa_django.storage.attempts import claim
from awa_django.storage.connection import conninfo
from tests.conftest import run_burst, wait_for, worker_config

pytestmark = pytest.mark.django_db(transaction=True)

STARTED = threading.Event()
RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    STARTED.clear()
    RELEASE.clear()
    yield
    RELEASE.set()  # never leave a held handler behind


@job(kind="tests.otel.held")
def held() -> None:
    STARTED.set()
    if not RELEASE.wait(30):
        raise TimeoutError("the test never released the job")


def test_every_metric_of_the_table_is_an_instrument(telemetry):
    assert set(telemetry.observer.instruments) == {m.name for m in metrics.ALL}
    for metric in metrics.ALL:
        instrument = telemetry.observer.instruments[metric.name]
        assert (instrument.name, instrument.unit, instrument.description) == (
            metric.name,
            metric.unit,
            metric.description,
        )


def test_a_jobs_whole_life_is_counted(telemetry, queue):
    plain = "testapp.plain"
    flaky = "testapp.fail_then_succeed"
    jobs.plain.using(queue=queue).enqueue(1)
    jobs.fail_then_succeed.using(queue=queue).enqueue(1)  # retried once, then completes

    worker = run_burst(queue)

    value = telemetry.value
    assert value("awa.job.enqueued", queue=queue, kind=plain) == 1
    assert value("awa.job.enqueued", queue=queue, kind=flaky) == 1
    assert value("awa.job.outcomes", queue=queue, kind=plain, outcome="completed") == 1
    assert value("awa.job.outcomes", queue=queue, kind=flaky, outcome="retryable") == 1
    assert value("awa.job.outcomes", queue=queue, kind=flaky, outcome="completed") == 1
    assert value("awa.job.retries", queue=queue, kind=flaky) == 1
    assert value("awa.job.retries", queue=queue, kind=plain) is None
    # Histograms: one duration per closed attempt, one per claim statement.
    assert value("awa.job.duration", queue=queue, kind=flaky, outcome="retryable") == 1
    assert value("awa.job.duration", queue=queue, kind=plain, outcome="completed") == 1
    (point,) = [
        p
        for p in telemetry.points("awa.job.duration")
        if dict(p.attributes) == {"queue": queue, "kind": plain, "outcome": "completed"}
    ]
    assert 0 < point.sum < 30
    assert value("awa.dispatch.claimed", queue=queue) == 3 == worker.completed  # attempts
    assert value("awa.dispatch.claims", queue=queue) == worker.claims
    assert value("awa.dispatch.claim.duration", queue=queue) == worker.claims
    assert value("awa.dispatch.empty_claim", queue=queue) == (worker.empty_claims or None)
    assert value("awa.job.stale_completions", queue=queue, kind=plain) is None
    # The worker stopped: down, not leading, nothing in flight.
    assert (value("awa.runtime.up"), value("awa.runtime.leader")) == (0, 0)
    assert value("awa.runtime.inflight") == 0


def test_claims_that_find_nothing_are_counted(telemetry, queue):
    worker = run_burst(queue)  # an empty queue

    assert worker.claims >= 1 and worker.empty_claims == worker.claims
    assert telemetry.value("awa.dispatch.empty_claim", queue=queue) == worker.empty_claims
    assert telemetry.value("awa.dispatch.claimed", queue=queue) is None


RINGS = {"queue", "claim", "lease"}


def pruned_rings(telemetry) -> set[str]:
    return {p.attributes["ring"] for p in telemetry.points("awa.maintenance.prune")}


@pytest.mark.parametrize("spans", [True, False], ids=["traced", "metrics-only"])
def test_runtime_gauges_while_a_job_runs(telemetry_factory, queue, spans):
    telemetry = telemetry_factory(spans=spans)
    held.using(queue=queue).enqueue()
    worker = Worker(worker_config(queue, burst=True, maintenance=True))
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            asyncio.run(asyncio.wait_for(worker.run(), 60))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, name="test-worker")
    thread.start()
    try:
        assert STARTED.wait(30), "the job never started"
        assert telemetry.value("awa.runtime.up") == 1
        assert telemetry.value("awa.runtime.inflight") == 1
        # This worker is the only candidate: it wins the election, and its
        # ring tasks tick as the term starts.
        wait_for(lambda: telemetry.value("awa.runtime.leader") == 1)
        wait_for(lambda: pruned_rings(telemetry) == RINGS)
    finally:
        RELEASE.set()
        thread.join(60)
    assert outcome == [None]
    assert len(telemetry.spans("process tests.otel.held")) == (1 if spans else 0)
    assert telemetry.value("awa.runtime.inflight") == 0
    assert (telemetry.value("awa.runtime.up"), telemetry.value("awa.runtime.leader")) == (0, 0)
    # The leader's maintenance ticks were timed and their ring outcomes counted.
    assert telemetry.value("awa.maintenance.task.duration", task="queue_ring") >= 1
    rotations = telemetry.points("awa.maintenance.rotate")
    assert {p.attributes["ring"] for p in rotations} == RINGS
    assert all(p.value >= 1 and p.attributes["outcome"] for p in rotations)
    assert pruned_rings(telemetry) == RINGS


def test_dead_letters_rescues_and_stale_completions_are_counted(telemetry, queue):
    jobs.fails_until_released.using(queue=queue).enqueue()
    jobs.overrun.using(queue=queue, max_attempts=1).enqueue(30.0)
    fast = {
        "HEARTBEAT_INTERVAL": 0.3,
        "HEARTBEAT_STALENESS": 1.5,
        "DEADLINE_RESCUE_INTERVAL": 0.2,
        "PROMOTE_INTERVAL": 0.1,
    }
    with override_settings(
        AWA={**fast, "QUEUE_DLQ": {queue: True}, "QUEUES": {queue: {"deadline": 0.5}}}
    ):
        worker = Worker(worker_config(queue, burst=True, maintenance=True))
        asyncio.run(asyncio.wait_for(worker.run(), 60))

    kind = "testapp.fails_until_released"
    assert telemetry.value("awa.job.dlq", queue=queue, kind=kind) == 1
    assert telemetry.value("awa.job.outcomes", queue=queue, kind=kind, outcome="failed") == 1
    assert telemetry.value("awa.maintenance.rescued", reason="deadline_expired") == 1
    # The overrunning handler finished after its rescue: its completion was stale.
    assert telemetry.value("awa.job.stale_completions", queue=queue, kind="testapp.overrun") == 1
    assert ops.queue_counts(queue)["dlq"] == 2


def test_queue_depth_and_lag_come_from_the_leaders_sample(telemetry, queue):
    hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    jobs.plain.using(queue=queue, run_at=hour_ago).enqueue(1)
    jobs.plain.using(queue=queue).enqueue(2)
    jobs.plain.using(queue=queue).enqueue(3)
    jobs.plain.using(queue=queue, run_in=3600).enqueue(4)
    other = f"{queue}-idle"
    ops.pause_queue(other)

    async def sample() -> int:
        async with AsyncConnectionPool(conninfo(), kwargs={"autocommit": True}) as pool:
            run = AsyncRunner(pool)
            await run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))  # the oldest one runs
            return await QueueGauges(PeriodicConfig(15.0), run).run_once()

    assert asyncio.run(sample()) >= 2
    depth = {
        state: telemetry.value("awa.queue.depth", queue=queue, state=state)
        for state in ("available", "scheduled", "running")
    }
    assert depth == {"available": 2, "scheduled": 1, "running": 1}
    # The hour-old job was claimed: the oldest waiting one is seconds old.
    lag = telemetry.value("awa.queue.lag", queue=queue)
    assert 0 <= lag < 600
    assert telemetry.value("awa.queue.depth", queue=other, state="available") == 0
    assert telemetry.value("awa.queue.lag", queue=other) == 0

    # A follower reports no queue: the leader does.
    telemetry.observer.runtime("follower")
    assert telemetry.points("awa.queue.depth") == []


def test_lag_is_the_age_of_the_oldest_available_job(telemetry, queue):
    hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    jobs.plain.using(queue=queue).enqueue(1)
    jobs.plain.using(queue=queue, run_at=hour_ago, priority=4).enqueue(2)

    async def sample() -> int:
        async with AsyncConnectionPool(conninfo(), kwargs={"autocommit": True}) as pool:
            return await QueueGauges(PeriodicConfig(15.0), AsyncRunner(pool)).run_once()

    asyncio.run(sample())
    assert 3600 <= telemetry.value("awa.queue.lag", queue=queue) < 3600 + 600
