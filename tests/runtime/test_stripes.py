"""Striped queues under real workers: wake-ups from every stripe, per-key order
across two processes, and a burst worker that drains every stripe.

The test process enqueues with ``QUEUE_STRIPE_COUNT = 4`` (override_settings);
worker processes get the same value through ``AWA_SETTINGS_JSON``, as every
process of a fleet must.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from django.db import connection
from django.test import override_settings
from testapp import jobs as testjobs

from awa_django import enqueue_many, ops
from awa_django.domain.stripes import physical_queues, route, stripe_name
from awa_django.runtime.process.worker import Worker
from awa_django.storage import AsyncRunner
from awa_django.storage.enqueue import enqueue_one
from tests.conftest import run_burst, worker_config
from tests.runtime.test_wakeups import Completions, connected, running, started

pytestmark = pytest.mark.django_db(transaction=True)

STRIPES = 4
ENV = {"AWA_SETTINGS_JSON": json.dumps({"QUEUE_STRIPE_COUNT": STRIPES})}


@pytest.fixture(autouse=True)
def _striped(reset_awa):
    with override_settings(AWA={"QUEUE_STRIPE_COUNT": STRIPES}):
        yield


def key_for(queue: str, stripe: int) -> str:
    """An ordering key that routes to ``stripe`` of ``queue``."""
    return next(
        key
        for key in (f"k{n}" for n in range(10_000))
        if route(queue, key) == stripe_name(queue, stripe)
    )


@pytest.mark.needs_session
def test_a_notify_on_any_stripe_wakes_the_worker(queue):
    # Polling once a minute: only the stripes' NOTIFYs answer in time.
    worker = Worker(worker_config(queue, burst=False, poll_interval=60))
    done = Completions([worker])

    async def main() -> None:
        async with running([worker]), connected() as conn:
            await started([worker])
            for n in range(STRIPES):
                job = testjobs.noop_async.using(queue=queue, ordering_key=key_for(queue, n))
                await AsyncRunner(conn)(enqueue_one(job.prepare()))
                await done.reach(n + 1, timeout=20)

    asyncio.run(main())
    assert worker.completed == STRIPES


def test_two_processes_drain_every_stripe_keeping_each_keys_order(queue, start_worker):
    keys = [f"key-{n}" for n in range(8)]
    enqueue_many(
        [testjobs.noop.using(queue=queue, ordering_key=keys[n % 8]).prepare(n) for n in range(400)]
    )
    for n in range(100):
        testjobs.noop.using(queue=queue).enqueue(n)
    stripes = list(physical_queues(queue))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT queue) FROM awa.ready_entries WHERE queue = ANY (%s)", [stripes]
        )
        assert cursor.fetchone()[0] == STRIPES  # the jobs lie on every stripe

    workers = [
        start_worker("--queue", f"{queue}:2", "--burst", "--no-maintenance", env=ENV)
        for _ in range(2)
    ]
    for worker in workers:
        assert worker.wait(timeout=180) == 0, worker.output()[-4000:]

    counts = ops.queue_counts(queue)
    assert counts["completed"] == 500
    assert sum(counts[s] for s in ("available", "running", "retryable", "failed")) == 0
    with connection.cursor() as cursor:
        # Claim order: claims of one lane serialise on its head, and batch ids
        # grow with every claim; items are in lane order within a batch.
        cursor.execute(
            "SELECT c.job_id, r.ordering_key, c.runtime_id FROM awa.claim_items c"
            " JOIN awa.ready_entries r ON r.ready_slot = c.ready_slot AND r.queue = c.queue"
            " AND r.priority = c.priority AND r.shard = c.shard AND r.lane_seq = c.lane_seq"
            " WHERE c.queue = ANY (%s) ORDER BY c.batch_id, c.item",
            [stripes],
        )
        claims = cursor.fetchall()
    assert len(claims) == 500
    assert len({runtime for _, _, runtime in claims}) == 2  # both processes took work
    for key in keys:
        ids = [job_id for job_id, ordering_key, _ in claims if ordering_key == key]
        assert len(ids) == 50 and ids == sorted(ids), key


def test_a_worker_with_fewer_stripes_still_drains_the_ones_left_over(queue, caplog):
    for n in range(12):
        testjobs.noop.using(queue=queue).enqueue(n)  # on q#0 .. q#3
    with override_settings(AWA={"QUEUE_STRIPE_COUNT": 2}), caplog.at_level(logging.WARNING):
        worker = run_burst(queue)
    assert worker.completed == 12
    assert "still hold jobs" in caplog.text
    assert ops.queue_counts(queue)["completed"] == 12
