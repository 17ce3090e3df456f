"""``storage.queues.gauges``: the leader's cheap reading of depth and lag.

The counts must agree with ``awa.state_counts`` (the console's exact
counts) in every state a job can wait or run in, and the reading must not
walk the ready ring: its plan reaches the segments and tombstones of a lane
through their indexes only and never reads ``ready_entries``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from django.test import override_settings
from testapp import jobs

from awa_django import ops
from awa_django.observability.hooks import Observer, observers
from awa_django.runtime.config import PeriodicConfig
from awa_django.runtime.leadership.maintenance import QueueGauges
from awa_django.sql import query
from awa_django.storage import SyncRunner, run
from awa_django.storage import queues as queue_store
from awa_django.storage.attempts import claim, close_attempts
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_many
from tests.factories import JobFactory, closure_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def reading(queue: str) -> tuple[int, int, int, float, bool] | None:
    rows = {row[0]: row[1:] for row in run(queue_store.gauges())}
    return rows.get(queue)


def exact(queue: str) -> tuple[int, int, int]:
    counts = ops.queue_counts(queue)
    return (
        counts["available"],
        counts["scheduled"] + counts["retryable"],
        counts["running"],
    )


def test_counts_agree_with_the_exact_counts_in_every_waiting_state(queue):
    ops.set_enqueue_shards(queue, 2)  # several lanes per priority
    for priority in (1, 2, 4):
        for _ in range(3):
            JobFactory(queue=queue, priority=priority)
    run(enqueue_many([JobFactory.build(queue=queue, priority=2) for _ in range(5)]))
    JobFactory(queue=queue, state="scheduled")
    assert reading(queue)[:3] == exact(queue) == (14, 1, 0)

    # One available job cancelled: a tombstone beyond its lane's cursor.
    cancelled = JobFactory(queue=queue, priority=4)
    assert ops.cancel_job(cancelled.id)
    assert reading(queue)[:3] == exact(queue) == (14, 1, 0)

    runtime = uuid.uuid4()
    claimed = run(claim(queue, 6, runtime, 300.0, 0.0))
    assert len(claimed) == 6
    assert reading(queue)[:3] == exact(queue) == (8, 1, 6)

    # Two close (one completes, one waits to retry): fewer running, one deferred more.
    run(close_attempts([closure_for(claimed[0], "completed")]))
    run(close_attempts([closure_for(claimed[1], "retryable")]))
    assert reading(queue)[:3] == exact(queue) == (8, 2, 4)

    # Everything claimed and cancelled ones skipped: nothing available, no lag.
    run(claim(queue, 100, runtime, 300.0, 0.0))
    available, _, _, lag, paused = reading(queue)
    assert (available, lag, paused) == (0, 0.0, False)
    assert exact(queue)[0] == 0


def test_pause_and_a_queue_with_only_a_control_row(queue):
    JobFactory(queue=queue)
    ops.pause_queue(queue)
    idle = f"{queue}-idle"
    ops.pause_queue(idle)
    assert reading(queue)[0] == 1 and reading(queue)[4] is True
    assert reading(idle) == (0, 0, 0, 0.0, True)
    ops.resume_queue(queue)
    assert reading(queue)[4] is False


INDEX_SCANS = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}


def nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def partitions(conn: psycopg.Connection, parent: str) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass",
        [f"awa.{parent}"],
    ).fetchall()
    return {name for (name,) in rows}


def test_the_reading_never_walks_the_ready_ring(queue):
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        runner = SyncRunner(conn)
        others = [f"{queue}-{n}" for n in range(300)]
        runner(enqueue_many([JobFactory.build(queue=q) for q in others for _ in range(10)]))
        for other in others[:200]:  # tombstones: 2,000 cancelled jobs in 200 lanes
            runner(queue_store.drain(other, "drained by a test"))
        for _ in range(200):  # 200 segments in this lane, most behind its cursor
            runner(enqueue_many([JobFactory.build(queue=queue) for _ in range(10)]))
        assert len(runner(claim(queue, 1500, uuid.uuid4(), 300.0, 0.0))) == 1500
        conn.execute("ANALYZE awa.queue_claim_heads, awa.queue_enqueue_heads, awa.ready_segments")
        conn.execute("ANALYZE awa.ready_entries, awa.ready_tombstones")
        holding = {
            name
            for table in ("ready_segments", "ready_tombstones")
            for (name,) in conn.execute(
                f"SELECT DISTINCT c.relname FROM awa.{table} g"
                " JOIN pg_class c ON c.oid = g.tableoid"
            )
        }
        assert any(name.startswith("ready_tombstones") for name in holding)
        lane_index = partitions(conn, "ready_segments_lane_idx")
        [[plan]] = conn.execute(
            "EXPLAIN (FORMAT JSON) " + query("queues", "queue_gauges")
        ).fetchall()
        rows = runner(queue_store.gauges())

    assert {row[0]: row[1] for row in rows}[queue] == 500
    found = list(nodes((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]))
    relations = {n.get("Relation Name", "") for n in found}
    assert not {r for r in relations if r.startswith("ready_entries")}
    seq = {n["Relation Name"] for n in found if n["Node Type"] == "Seq Scan"}
    assert seq & holding == set(), "segments or tombstones scanned instead of probed"
    probes = [n for n in found if n["Node Type"] in INDEX_SCANS and n["Index Name"] in lane_index]
    assert probes, "the lane heads are not found through ready_segments_lane_idx"


def restore(registered: list) -> None:
    """The hub's observers back as they were, in their order."""
    for observer in list(observers):
        observers.remove(observer)
    for observer in registered:
        observers.add(observer)


def test_the_task_reads_nothing_when_no_observer_takes_samples(queue):
    takers = [o for o in observers if type(o).queues_sampled is not Observer.queues_sampled]
    statements: list[object] = []

    async def runner(operation):
        statements.append(operation)
        return [(queue, 1, 0, 0, 0.0, False)]

    task = QueueGauges(PeriodicConfig(15.0), runner)
    registered = list(observers)
    for observer in takers:
        observers.remove(observer)
    try:
        assert asyncio.run(task.run_once()) == 0 and statements == []
    finally:
        restore(registered)
    assert takers, "the app installs observers that take samples"
    assert asyncio.run(task.run_once()) == 1 and len(statements) == 1


def test_a_striped_queue_is_one_reading(queue):
    with override_settings(AWA={"QUEUE_STRIPE_COUNT": 4}):
        for n in range(8):
            jobs.plain.using(queue=queue).enqueue(n)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT queue FROM awa.queue_enqueue_heads WHERE queue LIKE %s",
                [f"{queue}%"],
            )
            assert len(cursor.fetchall()) > 1  # stored on several stripes
        rows = [row for row in run(queue_store.gauges()) if row[0].startswith(queue)]
        assert [row[0] for row in rows] == [queue]
        assert rows[0][1] == ops.queue_counts(queue)["available"] == 8
