"""Hand-backs that must not beat the attempts they hand back.

* Shutdown hands back what still runs; an attempt whose handler finished
  but whose closure still waits in the completer (a slow flush) is not
  running: its completion is written first, never overtaken by a hand-back.
* The heartbeat hands back orphaned receipts (claimed by this runtime, run
  by nothing); a claim whose statement committed and whose jobs are not yet
  registered in flight is not orphaned.

An in-process worker in the test's own event loop; the slow flush and the
slow registration are real row locks held by the test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading

import psycopg
import pytest
from django.db import connections

from awa_django import job, ops
from awa_django.conf import RateLimit
from awa_django.runtime.process.worker import Worker
from awa_django.storage.connection import conninfo
from tests.conftest import refusing, run_burst, worker_config

pytestmark = pytest.mark.django_db(transaction=True)

#: Bounds each wait, so a regression fails instead of hanging.
TIMEOUT = 30.0
RUNS: list[str] = []
GATE = threading.Event()
#: Four slots claimed at once under a fleet rate limit that never binds.
FLEET = {
    "max_workers": 4,
    "claim_batch_size": 4,
    "rate_limit": RateLimit(max_rate=1000.0, burst=1000),
    "rate_limit_scope": "fleet",
}
SLOW_GATE = threading.Event()


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    RUNS.clear()
    GATE.clear()
    SLOW_GATE.clear()
    yield
    GATE.set()
    SLOW_GATE.set()
    RUNS.clear()


@job(kind="tests.races.gated")
def gated(label: str) -> str:
    RUNS.append(f"{label} started")
    if not GATE.wait(TIMEOUT):
        raise TimeoutError("the test never opened the gate")
    RUNS.append(label)
    return label


@job(kind="tests.races.slow")
async def slow(label: str) -> str:
    RUNS.append(f"{label} started")
    async with asyncio.timeout(TIMEOUT):
        while not SLOW_GATE.is_set():  # opened by the test mid-shutdown
            await asyncio.sleep(0.01)
    RUNS.append(label)
    return label


@job(kind="tests.races.quick")
async def quick(label: str) -> str:
    RUNS.append(label)
    return label


async def until(predicate, what: str) -> None:
    """Poll ``predicate`` (a condition, not a clock) until it holds."""
    async with asyncio.timeout(TIMEOUT):
        while not await predicate():
            await asyncio.sleep(0.01)


async def lock_claim_of(holder: psycopg.AsyncConnection, job_id: int) -> None:
    """Lock the claim row ``job_id``'s attempt closes through: its close waits."""
    cursor = await holder.execute(
        "SELECT claim_slot, batch_id FROM awa.open_receipts WHERE job_id = %s", [job_id]
    )
    slot, batch = await cursor.fetchone()
    await holder.execute(
        "SELECT 1 FROM awa.lease_claim_batches WHERE claim_slot = %s AND batch_id = %s FOR UPDATE",
        [slot, batch],
    )


async def lock_waiters(holder: psycopg.AsyncConnection) -> int:
    cursor = await holder.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return (await cursor.fetchone())[0]


def stopping_worker(queue: str, slots: int, caplog) -> Worker:
    """A worker of ``slots`` on ``queue`` that gives up on its handlers at
    once when stopped (one claim per attempt); its log captured."""
    caplog.set_level(logging.INFO, logger="awa_django.worker")
    config = dataclasses.replace(
        worker_config(queue, burst=False, max_workers=slots, claim_batch_size=1),
        shutdown_timeout=0.05,
    )
    return Worker(config)


def test_shutdown_writes_queued_completions_before_handing_back(queue, caplog):
    """A finished at once; its close waits on a lock.  B ran meanwhile (A's
    permit came back with its closure) and its closure queues behind A's.
    Shutdown then finds both still in flight: handing B back first would
    leave a finished job scheduled to run again."""
    first = gated.using(queue=queue).enqueue("A")
    second = quick.using(queue=queue).enqueue("B")
    worker = stopping_worker(queue, 1, caplog)

    async def scenario() -> None:
        running = asyncio.create_task(worker.run())
        async with await psycopg.AsyncConnection.connect(conninfo()) as holder:

            async def a_started() -> bool:
                return "A started" in RUNS

            await until(a_started, "A runs")
            await lock_claim_of(holder, first.id)
            GATE.set()

            async def b_queued() -> bool:
                # A's closure is being written (held), B's waits behind it.
                return "B" in RUNS and len(worker.completer._pending) == 1

            await until(b_queued, "B's closure waits behind A's")
            worker.request_stop()

            async def decided() -> bool:
                # Old: the hand-back statement waits on the lock beside A's
                # close.  New: shutdown says it writes the completions first.
                flushing = any("before handing back" in r.getMessage() for r in caplog.records)
                return flushing or await lock_waiters(holder) >= 2

            await until(decided, "shutdown decides what to hand back")
            await holder.rollback()
        async with asyncio.timeout(TIMEOUT):
            await running

    asyncio.run(scenario())
    assert [ops.get_job(ref.id).state for ref in (first, second)] == ["completed", "completed"]
    assert RUNS == ["A started", "A", "B"] and worker.handed_back == 0


def test_a_handler_finishing_during_the_shutdown_flush_is_not_handed_back(queue, caplog):
    """A finished; its close waits on a lock, so shutdown flushes it.  C
    finishes during that flush: its closure queues behind A's while C is
    still in flight.  The flush only waited for A's, so C used to be handed
    back as well (that hand-back either won, leaving a finished job to run
    again, or lost, stale).  C's own close waits on a second lock, which
    keeps both orders apart."""
    first = gated.using(queue=queue).enqueue("A")
    third = slow.using(queue=queue).enqueue("C")
    worker = stopping_worker(queue, 2, caplog)

    def logged(text: str) -> bool:
        return any(text in r.getMessage() for r in caplog.records)

    async def scenario() -> None:
        running = asyncio.create_task(worker.run())
        connect = psycopg.AsyncConnection.connect
        async with await connect(conninfo()) as on_a, await connect(conninfo()) as on_c:

            async def both_started() -> bool:
                return "A started" in RUNS and "C started" in RUNS

            await until(both_started, "A and C run")
            await lock_claim_of(on_a, first.id)
            await lock_claim_of(on_c, third.id)
            GATE.set()

            async def a_held() -> bool:
                return "A" in RUNS and await lock_waiters(on_a) >= 1

            await until(a_held, "A's close waits")
            worker.request_stop()

            async def flushing() -> bool:
                return logged("before handing back")

            await until(flushing, "shutdown flushes A's completion")
            SLOW_GATE.set()

            async def c_queued() -> bool:
                return "C" in RUNS and len(worker.completer._pending) == 1

            await until(c_queued, "C's closure queues behind A's")
            await on_a.rollback()

            async def decided() -> bool:
                # Old: C's hand-back waits on C's lock beside C's close.
                # New: shutdown writes C's completion instead.
                return logged("arrived while flushing") or await lock_waiters(on_c) >= 2

            await until(decided, "shutdown decides about C")
            await on_c.rollback()
        async with asyncio.timeout(TIMEOUT):
            await running

    asyncio.run(scenario())
    assert [ops.get_job(ref.id).state for ref in (first, third)] == ["completed", "completed"]
    assert worker.handed_back == 0 and worker.completer.stale == 0
    assert sorted(RUNS) == ["A", "A started", "C", "C started"]


def test_the_heartbeat_leaves_alone_a_claim_not_yet_registered(queue):
    """Under a fleet rate limit a claim gives back the tokens it did not use
    after its commit (it used to, before the registration of its jobs in
    flight).  The test holds that refund on a row lock; meanwhile a
    heartbeat (hand-back grace ~0) must not take the committed receipt for
    an orphan: the job would run twice."""
    config = worker_config(queue, burst=False, **FLEET)
    worker = Worker(config)
    made: list[int] = []

    async def scenario() -> dict[str, int]:
        running = asyncio.create_task(worker.run())

        async def started() -> bool:
            return worker.started

        await until(started, "the worker runs")
        connect = psycopg.AsyncConnection.connect
        async with await connect(conninfo()) as claims, await connect(conninfo()) as refunds:
            # 1. The claim statement waits (its batch row cannot be inserted)...
            await claims.execute("LOCK TABLE awa.lease_claim_batches IN EXCLUSIVE MODE")
            made.append(await asyncio.to_thread(enqueue_quick, queue, "C"))

            async def claim_waits() -> bool:
                return await lock_waiters(refunds) >= 1

            await until(claim_waits, "the claim waits")
            # 2. ... having taken its tokens: hold their row, then let it commit.
            await refunds.execute(
                "SELECT 1 FROM awa.rate_buckets WHERE queue = %s FOR UPDATE", [queue]
            )
            await claims.rollback()

            async def claimed_not_registered() -> bool:
                # Committed: the job left 'available'.  Its jobs are registered
                # before the refund now, so C may already have run and closed its
                # receipt by the time this looks (an open receipt is not a given).
                cursor = await refunds.execute("SELECT state FROM awa.jobs WHERE id = %s", made)
                committed = (await cursor.fetchone())[0] in {"running", "completed"}
                return committed and await lock_waiters(claims) >= 1

            await until(claimed_not_registered, "the claim committed, its refund waits")
            beat = worker.heartbeat
            interval, beat.config = beat.config, dataclasses.replace(beat.config, interval=1e-6)
            try:
                handed = await beat.run_once()
            finally:
                beat.config = interval
            await refunds.rollback()

            async def completed() -> bool:
                cursor = await claims.execute("SELECT state FROM awa.jobs WHERE id = %s", made)
                return (await cursor.fetchone()) == ("completed",)

            if not handed["handed_back"]:  # (handed back, C would wait for promotion)
                await until(completed, "C completes")
            await claims.rollback()
        worker.request_stop()
        async with asyncio.timeout(TIMEOUT):
            await running
        return handed

    handed = asyncio.run(scenario())
    assert handed["handed_back"] == 0
    assert RUNS == ["C"] and ops.get_job(made[0]).state == "completed"


@pytest.fixture
def refunds_refused(raw_conn, queue):
    """Every refund of fleet rate tokens on ``queue`` fails (a trigger)."""
    when = f"NEW.queue = '{queue}' AND current_query() LIKE '%refund_rate_tokens%'"
    with refusing(raw_conn, "test_refuse_refund", "UPDATE ON awa.rate_buckets", when):
        yield


def test_a_failed_fleet_rate_refund_leaks_no_permit_and_drops_no_job(
    queue, refunds_refused, caplog
):
    """A claim that got fewer jobs than it took tokens for refunds the rest
    after its commit.  When that refund failed, the claimed jobs were never
    registered in flight: their permits stayed taken and they sat claimed
    until a counted hand-back.  Now they run, and every permit comes back."""
    refs = [quick.using(queue=queue).enqueue(label) for label in ("A", "B")]

    worker = run_burst(queue, timeout=TIMEOUT, **FLEET)

    assert sorted(RUNS) == ["A", "B"]
    infos = [ops.get_job(ref.id) for ref in refs]
    assert [(i.state, i.attempt) for i in infos] == [("completed", 1), ("completed", 1)]
    (dispatcher,) = worker.dispatchers
    assert dispatcher.permits.in_use == 0
    assert any("test_refuse_refund" in r.getMessage() for r in caplog.records)


def enqueue_quick(queue: str, label: str) -> int:
    """Enqueue from a thread of its own (the test's loop runs the worker)."""
    try:
        return quick.using(queue=queue).enqueue(label).id
    finally:
        connections.close_all()
