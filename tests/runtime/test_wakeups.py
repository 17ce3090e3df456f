"""Wake-ups on the hot path: what a NOTIFY costs, and when a completion is flushed.

* A dispatcher woken by NOTIFY waits a short back-off before claiming, so a
  burst of enqueues shares one claim, and of several workers woken by the
  same enqueue the ones that keep finding nothing stand back: a job costs
  about one claim, not one per worker.
* The batching completer flushes at once when every attempt the dispatchers
  run has submitted (a 1-permit queue must not pay the flush interval on
  every job), and still waits for batch-mates while some are running.

Real PostgreSQL and real workers; the assertions bound counts of claim
statements, with margins that hold on a slow machine and still fail without
the behaviour they pin.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Sequence

import psycopg
import pytest
from testapp import jobs as testjobs

from awa_django.domain.closures import completed
from awa_django.runtime.attempts import dispatcher as dispatcher_module
from awa_django.runtime.attempts import pacing
from awa_django.runtime.attempts.pacing import WakeupBackoff
from awa_django.runtime.completion.completer import BatchCompleter, CompletionEvent
from awa_django.runtime.config import CompleterConfig
from awa_django.runtime.process.worker import Worker
from awa_django.storage import AsyncRunner
from awa_django.storage.attempts import claim
from awa_django.storage.connection import conninfo
from awa_django.storage.enqueue import enqueue_one
from tests.conftest import worker_config
from tests.factories import JobFactory

# Asserts on time: one xdist process runs the "timing" modules in turn.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("timing")]


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_backoff_grows_with_empty_claims_and_shrinks_with_work():
    backoff = WakeupBackoff(0.001, 0.2, rng=random.Random(7))
    assert 0.0005 <= backoff.delay() <= 0.0015
    for _ in range(10):
        backoff.claimed(0)
    assert backoff.current == 0.2  # capped at the poll interval
    assert all(0.1 <= backoff.delay() <= 0.2 for _ in range(100))
    backoff.claimed(3)
    assert backoff.current == pytest.approx(0.05)
    for _ in range(10):
        backoff.claimed(1)
    assert backoff.current == 0.001


def test_without_a_debounce_a_winner_claims_at_once_and_losers_back_off():
    backoff = WakeupBackoff(0.0, 0.2, rng=random.Random(7))
    assert backoff.delay() == 0.0  # a lone NOTIFY is answered at once
    backoff.claimed(0)  # lost the race: from the floor up
    assert backoff.current == pacing.BACKOFF_FLOOR
    assert 0.0005 <= backoff.delay() <= 0.0015
    for _ in range(10):
        backoff.claimed(0)
    assert backoff.current == 0.2
    for _ in range(3):
        backoff.claimed(1)
    assert backoff.current == pytest.approx(0.2 / 4**3)
    backoff.claimed(1)  # below the floor: no wait again
    assert backoff.current == 0.0 and backoff.delay() == 0.0


class Completions:
    """Counts applied completions of some workers; wakes waiters on a target."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.count = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        for worker in workers:
            worker.completer.subscribe(self._seen)

    def _seen(self, events: Sequence[CompletionEvent]) -> None:
        self.count += sum(event.applied for event in events)
        for target, future in self._waiters:
            if self.count >= target and not future.done():
                future.set_result(None)

    async def reach(self, target: int, timeout: float = 30) -> None:
        if self.count >= target:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        await asyncio.wait_for(future, timeout)


@contextlib.asynccontextmanager
async def running(workers: Sequence[Worker]) -> AsyncIterator[None]:
    """Run the workers for the block; stop them and wait, whatever the block did."""
    tasks = [asyncio.create_task(worker.run()) for worker in workers]
    try:
        yield
    finally:
        for worker in workers:
            worker.request_stop()
        await asyncio.gather(*tasks)


@contextlib.asynccontextmanager
async def connected() -> AsyncIterator[psycopg.AsyncConnection]:
    """An autocommit connection of the test's own (a producer, a completer's)."""
    async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
        yield conn


async def enqueue_each(conn: psycopg.AsyncConnection, queue: str) -> None:
    """One job in its own transaction (autocommit): one NOTIFY."""
    await AsyncRunner(conn)(enqueue_one(testjobs.noop_async.using(queue=queue).prepare()))


async def started(workers: Sequence[Worker]) -> None:
    """Until every worker LISTENs and has made its first (empty) claim."""
    for worker in workers:
        await asyncio.wait_for(worker.notifier.listening.wait(), 10)
    while any(worker.claims == 0 for worker in workers):
        await asyncio.sleep(0.005)


@pytest.mark.needs_session
def test_a_burst_of_notifications_shares_one_claim(queue, monkeypatch):
    # A long debounce (0.5-1.5 s with the jitter) makes the window wide
    # enough that five enqueues 50 ms apart always fall into it; without a
    # debounce each of them is claimed on its own.
    monkeypatch.setattr(dispatcher_module, "WAKEUP_DEBOUNCE", 1.0)
    worker = Worker(worker_config(queue, burst=False, poll_interval=60))
    done = Completions([worker])

    async def main() -> int:
        async with running([worker]), connected() as conn:
            await started([worker])
            before = worker.claims
            for _ in range(5):
                await enqueue_each(conn, queue)
                await asyncio.sleep(0.05)
            await done.reach(5)
            return worker.claims - before

    assert asyncio.run(main()) == 1


@pytest.mark.needs_session
def test_workers_woken_by_the_same_notify_claim_about_once_per_job(queue):
    # Four workers LISTEN on one queue; jobs arrive one at a time, so every
    # enqueue wakes all four.  Without the back-off each claims: ~4 claims
    # per job.  With it, the ones that keep losing stand by near the poll
    # interval: ~1.2-1.6 here (start-up and stand-by claims over 1-2 s).
    jobs = 80
    workers = [Worker(worker_config(queue, burst=False)) for _ in range(4)]
    done = Completions(workers)

    async def main() -> None:
        async with running(workers), connected() as conn:
            await started(workers)
            for n in range(1, jobs + 1):
                await enqueue_each(conn, queue)
                await done.reach(n)

    asyncio.run(main())
    claims = sum(worker.claims for worker in workers)
    assert sum(worker.completed for worker in workers) == jobs
    assert claims / jobs <= 2.5, [(w.claims, w.empty_claims, w.completed) for w in workers]


async def with_completer(config: CompleterConfig, scenario):
    async with connected() as conn:
        run = AsyncRunner(conn)
        completer = BatchCompleter(config, run)
        await completer.start()
        try:
            return await scenario(run, completer)
        finally:
            await completer.stop()


def test_completer_flushes_at_once_when_every_running_attempt_has_submitted(queue):
    JobFactory(queue=queue)

    async def scenario(run: AsyncRunner, completer: BatchCompleter) -> bool:
        [job] = await run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))
        completer.track(lambda: 1)  # the one attempt running is this one
        # The flush interval is a minute: only the early flush answers in time.
        return await asyncio.wait_for(completer.submit(completed(job, None)), 10)

    assert asyncio.run(with_completer(CompleterConfig(512, 60.0), scenario)) is True


def test_completer_waits_for_batch_mates_still_running(queue):
    JobFactory.create_batch(2, queue=queue)

    async def scenario(run: AsyncRunner, completer: BatchCompleter) -> list[int]:
        jobs = await run(claim(queue, 2, uuid.uuid4(), 300.0, 0.0))
        completer.track(lambda: 2)
        sizes: list[int] = []
        completer.subscribe(lambda events: sizes.append(len(events)))
        first = asyncio.ensure_future(completer.submit(completed(jobs[0], None)))
        await asyncio.sleep(0)  # the first closure is pending, its mate still running
        await asyncio.gather(first, completer.submit(completed(jobs[1], None)))
        return sizes

    # Both in one flush: the first was held for its batch-mate (a 60 s
    # interval, cut short once the mate submitted and nobody else runs).
    sizes = asyncio.run(with_completer(CompleterConfig(512, 60.0), scenario))
    assert sizes == [2]
