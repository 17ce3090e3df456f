"""Backpressure: ``enqueue_many(max_queue_depth=N, wait=s)`` and ``ops.wait_for_room``.

The depth producers compare is the exact count of available jobs, read
from the lane counters in one statement (pinned by a query count and by
the plan, which never touches the ready ring).  Worker processes drain the
queue while producers wait; a paused queue makes the moment a producer
blocks an event the test can wait for, so no assertion depends on timing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from testapp.jobs import plain

import awa_django
from awa_django import InvalidJob, QueueFull, enqueue_many, ops
from awa_django.sql import query
from awa_django.storage.attempts import claim
from awa_django.storage.base import run
from awa_django.storage.connection import conninfo
from docs.examples import backpressure as example
from tests.conftest import wait_for


def batch(queue: str, size: int, **options) -> list:
    return [plain.using(queue=queue, **options).prepare(n) for n in range(size)]


def available(queue: str) -> int:
    return ops.queue_counts(queue)["available"]


@pytest.fixture
def sync_thread():
    """Close the Django connection that sync_to_async's thread opened for async code."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


# --- arguments -------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_queue_depth": -1}, "max_queue_depth must not be negative"),
        ({"max_queue_depth": 1.5}, "max_queue_depth must be an integer"),
        ({"max_queue_depth": True}, "max_queue_depth must be an integer"),
        ({"max_queue_depth": "10"}, "max_queue_depth must be an integer"),
        ({"max_queue_depth": 10, "wait": -1}, "wait must not be negative"),
        ({"max_queue_depth": 10, "wait": dt.timedelta(seconds=-1)}, "wait must not be negative"),
        ({"max_queue_depth": 10, "wait": float("nan")}, "wait must be seconds"),
        ({"max_queue_depth": 10, "wait": "5"}, "wait must be seconds"),
        ({"wait": 5}, "wait goes with max_queue_depth"),
        ({"wait": -5}, "wait must not be negative"),
    ],
)
def test_bad_limits_are_typed_errors_and_write_nothing(queue, options, message):
    with pytest.raises(InvalidJob, match=message):
        enqueue_many(batch(queue, 3), **options)
    assert available(queue) == 0
    # Checked before anything else, so an empty batch is no way around them.
    with pytest.raises(InvalidJob, match=message):
        enqueue_many([], **options)


@pytest.mark.django_db
def test_bad_helper_arguments_are_typed_errors(queue):
    with pytest.raises(InvalidJob, match="must not be negative"):
        ops.wait_for_room(queue, -1, 0)
    with pytest.raises(InvalidJob, match="timeout must not be negative"):
        ops.wait_for_room(queue, 1, -0.5)
    with pytest.raises(InvalidJob, match="invalid queue name"):
        ops.wait_for_room("no spaces", 1, 0)
    with pytest.raises(InvalidJob, match="invalid queue name"):
        ops.queue_depth("bad#name")


def test_queue_full_is_public():
    assert awa_django.QueueFull is QueueFull
    assert "QueueFull" in awa_django.__all__
    assert issubclass(QueueFull, awa_django.exceptions.AwaError)


# --- the check -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_batch_passes_at_n_and_is_refused_above_it_with_nothing_written(queue):
    enqueue_many(batch(queue, 5))
    # "More than N" is full: a queue holding exactly N still takes the batch.
    enqueue_many(batch(queue, 3), max_queue_depth=5)
    assert available(queue) == 8

    with pytest.raises(QueueFull) as caught:
        enqueue_many(batch(queue, 3), max_queue_depth=7)
    full = caught.value
    assert (full.queue, full.depth, full.max_depth, full.paused) == (queue, 8, 7, False)
    assert full.waited < 1
    assert "holds 8 available jobs, more than the limit of 7" in str(full)
    assert available(queue) == 8

    # max_queue_depth=0: only into an empty queue.
    other = f"{queue}-empty"
    enqueue_many(batch(other, 2), max_queue_depth=0)
    with pytest.raises(QueueFull):
        enqueue_many(batch(other, 1), max_queue_depth=0)


@pytest.mark.django_db
def test_every_queue_of_a_batch_is_checked(queue):
    roomy, crowded = f"{queue}-a", f"{queue}-b"
    enqueue_many(batch(crowded, 3))
    with pytest.raises(QueueFull) as caught:
        enqueue_many([*batch(roomy, 2), *batch(crowded, 1)], max_queue_depth=2)
    assert (caught.value.queue, caught.value.depth) == (crowded, 3)
    assert available(roomy) == 0 and available(crowded) == 3

    enqueue_many([*batch(roomy, 2), *batch(crowded, 1)], max_queue_depth=3)
    assert available(roomy) == 2 and available(crowded) == 4


@pytest.mark.django_db
def test_the_depth_is_exact_across_lanes_claims_cancels_and_schedules(queue):
    ops.set_enqueue_shards(queue, 2)
    ids = enqueue_many(batch(queue, 10))
    for n in range(5):  # one-job segments, on both priorities' lanes
        plain.using(queue=queue, priority=1 + 2 * (n % 2)).enqueue(n)
    plain.using(queue=queue, run_in=3600).enqueue(0)  # scheduled: not available
    assert ops.queue_depth(queue) == 15

    assert len(run(claim(queue, 3, uuid.uuid4(), 300.0, 0.0))) == 3
    assert ops.queue_depth(queue) == 12
    assert ops.cancel_job(ids[-1]) and ops.cancel_job(ids[-2])  # tombstones past the cursor
    assert ops.queue_depth(queue) == 10 == available(queue)
    assert ops.queue_counts(queue)["scheduled"] == 1

    ops.drain_queue(queue)
    assert ops.queue_depth(queue) == 0 == available(queue)
    assert ops.queue_depth(f"{queue}-unknown") == 0


@pytest.mark.django_db
def test_a_striped_queue_counts_every_stripe(queue):
    with override_settings(AWA={"QUEUE_STRIPE_COUNT": 3}):
        for _ in range(4):  # a batch takes one stripe: these spread over them
            enqueue_many(batch(queue, 5))
        plain.using(queue=queue).enqueue(0)
        assert ops.queue_depth(queue) == 21 == available(queue)
        with pytest.raises(QueueFull) as caught:
            enqueue_many(batch(queue, 1), max_queue_depth=20)
        assert (caught.value.queue, caught.value.depth) == (queue, 21)

        ops.pause_queue(queue)  # the logical queue's control row pauses every stripe
        with pytest.raises(QueueFull) as caught:
            enqueue_many(batch(queue, 1), max_queue_depth=20)
        assert caught.value.paused


@pytest.mark.django_db
def test_a_paused_queue_is_reported_and_still_takes_jobs_below_the_limit(queue):
    enqueue_many(batch(queue, 4))
    ops.pause_queue(queue)
    with pytest.raises(QueueFull) as caught:
        enqueue_many(batch(queue, 1), max_queue_depth=3)
    assert caught.value.paused and "(the queue is paused)" in str(caught.value)
    enqueue_many(batch(queue, 1), max_queue_depth=4)
    assert available(queue) == 5


# --- cost: one cheap statement -----------------------------------------------------


@pytest.mark.django_db
def test_the_check_is_one_statement_on_the_lane_counters(queue):
    enqueue_many(batch(queue, 3))
    with CaptureQueriesContext(connection) as unguarded:
        enqueue_many(batch(queue, 3))
    with CaptureQueriesContext(connection) as guarded:
        enqueue_many(batch(queue, 3), max_queue_depth=100)
    assert len(guarded) == len(unguarded) + 1
    [extra] = [q["sql"] for q in guarded if "queue_claim_heads" in q["sql"]]
    assert "ready_entries" not in extra and "ready_segments" not in extra

    with CaptureQueriesContext(connection) as reads:
        assert ops.queue_depth(queue) == 9
    assert len(reads) == 1


def plan_nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)


def test_the_depth_plan_never_touches_the_ready_ring(queue, reset_awa):
    others = [f"{queue}-{n}" for n in range(200)]
    enqueue_many([job for other in others for job in batch(other, 10)])
    for other in others:  # tombstones: 2,000 cancelled jobs in 200 lanes
        ops.drain_queue(other)
    for n in range(50):  # many segments; half of the lanes' jobs claimed
        enqueue_many(batch(queue, 20, priority=1 + n % 4))
    run(claim(queue, 500, uuid.uuid4(), 300.0, 0.0))
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute("ANALYZE awa.queue_claim_heads, awa.queue_enqueue_heads")
        conn.execute("ANALYZE awa.ready_segments, awa.ready_entries, awa.ready_tombstones")
        holding = {
            name
            for (name,) in conn.execute(
                "SELECT DISTINCT c.relname FROM awa.ready_tombstones t"
                " JOIN pg_class c ON c.oid = t.tableoid"
            )
        }
        [[plan]] = conn.execute(
            "EXPLAIN (FORMAT JSON) " + query("queues", "available_depth"), {"queues": [queue]}
        ).fetchall()
    assert ops.queue_depth(queue) == 500 == available(queue)
    found = list(plan_nodes((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]))
    relations = {node.get("Relation Name", "") for node in found}
    assert {"queue_claim_heads", "queue_enqueue_heads"} <= relations
    assert not {r for r in relations if r.startswith(("ready_entries", "ready_segments"))}
    scanned = {node.get("Relation Name") for node in found if node["Node Type"] == "Seq Scan"}
    assert holding and not scanned & holding, "tombstones scanned instead of probed"


# --- transactions ------------------------------------------------------------------


@pytest.mark.django_db
def test_inside_a_transaction_a_wait_is_refused_and_a_check_leaves_it_usable(queue):
    # pytest-django runs this test inside transaction.atomic().
    assert connection.in_atomic_block
    with pytest.raises(InvalidJob, match="inside a transaction"):
        enqueue_many(batch(queue, 1), max_queue_depth=10, wait=1)
    with pytest.raises(InvalidJob, match="inside a transaction"):
        enqueue_many(batch(queue, 1), max_queue_depth=10, wait=dt.timedelta(milliseconds=1))
    with pytest.raises(InvalidJob, match="inside a transaction"):
        ops.wait_for_room(queue, 10, 5)
    assert available(queue) == 0

    enqueue_many(batch(queue, 2), max_queue_depth=10, wait=0)
    enqueue_many(batch(queue, 2), max_queue_depth=10, wait=dt.timedelta(0))
    with transaction.atomic():
        with pytest.raises(QueueFull):
            enqueue_many(batch(queue, 1), max_queue_depth=3)
        plain.using(queue=queue).enqueue(1)  # the transaction is still usable
    assert ops.wait_for_room(queue, 5, 0) == 5


# --- waiting, with real workers ----------------------------------------------------


def producer(
    queue: str, batches: int, size: int, limit: int, samples: list[int], errors: list
) -> Callable[[], None]:
    def produce() -> None:
        try:
            for _ in range(batches):
                enqueue_many(batch(queue, size), max_queue_depth=limit, wait=120)
                samples.append(ops.queue_depth(queue))  # the peak: right after a write
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    return produce


class Sampler:
    """Reads the queue's depth over and over, on its own connection, until stopped."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.samples: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="depth-sampler")

    def _run(self) -> None:
        try:
            while not self.stop.wait(0.005):
                self.samples.append(ops.queue_depth(self.queue))
        finally:
            connections.close_all()

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_depth_stays_within_n_plus_one_batch(queue, reset_awa, start_worker):
    limit, size, batches = 40, 10, 24
    ops.pause_queue(queue)
    start_worker("--queue", f"{queue}:4", "--no-maintenance")
    samples: list[int] = []
    errors: list[BaseException] = []
    thread = threading.Thread(target=producer(queue, batches, size, limit, samples, errors))
    with Sampler(queue) as sampler:
        thread.start()
        # Paused, nothing drains: the producer writes while the queue holds
        # at most N and then has to wait, at exactly N + one batch.
        wait_for(lambda: ops.queue_depth(queue) > limit)
        assert ops.queue_depth(queue) == limit + size
        assert thread.is_alive() and not errors
        ops.resume_queue(queue)  # the worker drains; the producer goes on
        thread.join(180)
    assert not thread.is_alive() and errors == []
    assert len(samples) == batches
    assert max(samples) <= limit + size
    assert sampler.samples and max(sampler.samples) <= limit + size
    wait_for(lambda: ops.queue_counts(queue)["completed"] == batches * size, timeout=120)
    assert ops.queue_depth(queue) == 0


def test_concurrent_producers_stay_within_n_plus_a_batch_each(queue, reset_awa, start_worker):
    limit, size, batches, producers = 30, 10, 10, 3
    start_worker("--queue", f"{queue}:4", "--no-maintenance")
    samples: list[int] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=producer(queue, batches, size, limit, samples, errors))
        for _ in range(producers)
    ]
    with Sampler(queue) as sampler:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
    assert errors == [] and len(samples) == batches * producers
    assert max(samples + sampler.samples) <= limit + producers * size
    wait_for(lambda: ops.queue_counts(queue)["completed"] == batches * size * producers, 120)


def test_a_paused_queue_holds_producers_until_it_is_resumed(queue, reset_awa, start_worker):
    enqueue_many(batch(queue, 5))
    ops.pause_queue(queue)
    start_worker("--queue", f"{queue}:2", "--no-maintenance")
    with pytest.raises(QueueFull) as caught:
        ops.wait_for_room(queue, 2, 0.3)
    full = caught.value
    assert (full.depth, full.paused) == (5, True)
    assert full.waited >= 0.3  # it waited out its timeout
    with pytest.raises(QueueFull):
        enqueue_many(batch(queue, 1), max_queue_depth=2, wait=0.05)
    assert available(queue) == 5

    ops.resume_queue(queue)
    assert ops.wait_for_room(queue, 2, 120) <= 2
    ids = enqueue_many(batch(queue, 1), max_queue_depth=2, wait=120)
    wait_for(lambda: ops.get_job(ids[0]).state == "completed", timeout=60)


def test_async_producers_wait_on_the_event_loop(queue, reset_awa, sync_thread):
    enqueue_many(batch(queue, 3))
    with pytest.raises(QueueFull) as caught:
        asyncio.run(ops.await_for_room(queue, 2, 0.05))
    assert caught.value.depth == 3 and caught.value.waited >= 0.05
    assert asyncio.run(ops.await_for_room(queue, 3, 0)) == 3
    assert asyncio.run(ops.aqueue_depth(queue)) == 3


# --- the how-to's examples -----------------------------------------------------------


def test_the_import_example_writes_every_batch(reset_awa, sync_thread):
    assert example.import_images(range(1_200)) == 1_200
    assert ops.queue_depth("thumbnails") == 1_200
    asyncio.run(example.feed_thumbnails([1, 2]))
    assert ops.queue_depth("thumbnails") == 1_202


@pytest.mark.django_db
def test_the_request_example_refuses_when_the_queue_is_swamped(capsys):
    assert example.thumbnail_later(1)
    enqueue_many([example.make_thumbnail.prepare(n) for n in range(5_000)])
    assert not example.thumbnail_later(2)
    assert "thumbnails is 5001 jobs deep" in capsys.readouterr().out
