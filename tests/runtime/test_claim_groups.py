"""How a claim's attempts run and close: in place, together, and overlapped.

* Every attempt runs in a task of its own.  On Python 3.12+ it starts as an
  eager task: one whose handler does not wait finishes at once, and the
  closures of a claim go to the completer as one group.
* An attempt that waits carries on in its task and closes on its own.
* A plain function's result comes back from its thread and is closed with
  its batch-mates without any task or coroutine.
* A permit comes back once its closure is handed over, so the next claim
  overlaps the writing of the last one; closures not yet written are
  bounded by ``max_workers``.

Real PostgreSQL, an in-process worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

import awa_django
from awa_django import job
from awa_django.domain.records import Closure
from awa_django.runtime.attempts import eager
from awa_django.runtime.process.worker import Worker
from tests.conftest import run_burst, worker_config

pytestmark = pytest.mark.django_db(transaction=True)

#: The task each handler ran in (kept alive, so ids stay distinct).
RAN_IN: list[asyncio.Task[object] | None] = []


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    RAN_IN.clear()
    yield
    RAN_IN.clear()


@job(kind="tests.groups.in_place")
async def in_place(n: int = 0) -> int:
    RAN_IN.append(asyncio.current_task())
    return n


@job(kind="tests.groups.waits")
async def waits(n: int = 0) -> int:
    before = asyncio.current_task()
    await asyncio.sleep(0.005)
    RAN_IN.append(asyncio.current_task())
    assert asyncio.current_task() is before
    return n


def enqueue(call, count: int) -> list[int]:
    return awa_django.enqueue_many([call.prepare(n) for n in range(count)])


def test_a_claims_attempts_run_in_tasks_of_their_own_and_close_in_one_flush(queue):
    enqueue(in_place.using(queue=queue), 200)
    flushes: list[int] = []
    worker = Worker(worker_config(queue, max_workers=200, claim_batch_size=200))
    worker.completer.subscribe(lambda events: flushes.append(len(events)))
    asyncio.run(asyncio.wait_for(worker.run(), 60))

    assert worker.completed == 200
    # A task each, never the claim loop's: a handler's asyncio.timeout or
    # task group binds to its own attempt.
    assert None not in RAN_IN
    assert len({id(task) for task in RAN_IN}) == 200
    assert sum(flushes) == 200
    if eager.EAGER:
        # Started eagerly (Python 3.12+), they finish at once: the closures
        # of a claim go to the completer as one group.
        assert len(flushes) <= worker.claims - worker.empty_claims


def test_attempts_that_wait_get_their_own_task_and_all_close(queue):
    enqueue(in_place.using(queue=queue), 50)
    enqueue(waits.using(queue=queue), 50)
    worker = run_burst(queue, max_workers=100, claim_batch_size=100)

    assert worker.completed == 100
    assert worker.completer.stale == 0
    waited = RAN_IN[-50:] if len(RAN_IN) == 100 else []
    assert len({id(task) for task in waited}) == 50  # one task each


def test_permits_come_back_at_hand_over_and_unwritten_closures_are_bounded(queue):
    enqueue(in_place.using(queue=queue), 20)
    worker = Worker(worker_config(queue, burst=False, max_workers=4, claim_batch_size=4))
    original = worker.completer.submit_group
    gate = asyncio.Event()

    async def held(closures: Sequence[Closure]) -> list[bool | Exception]:
        await gate.wait()
        return await original(closures)

    worker.completer.submit_group = held  # type: ignore[method-assign]

    async def main() -> tuple[int, int, int]:
        running = asyncio.create_task(worker.run())
        try:
            # Nothing can be written: the first claim's 4 closures wait, their
            # permits are free, so a second claim runs 4 more; with 8 closures
            # waiting (more than max_workers), no third claim starts.
            for _ in range(400):
                if len(RAN_IN) >= 8:
                    break
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.2)
            ran_while_held = len(RAN_IN)
            held_permits = worker.dispatchers[0].permits.in_use
            gate.set()
            for _ in range(2000):
                if worker.completed >= 20:
                    break
                await asyncio.sleep(0.005)
            return ran_while_held, held_permits, worker.completed
        finally:
            worker.request_stop()
            await running

    ran_while_held, held_permits, completed = asyncio.run(main())
    assert ran_while_held == 8
    assert held_permits == 0
    assert completed == 20


def test_a_burst_worker_stops_once_its_queue_runs_dry_not_on_its_next_tick(queue, monkeypatch):
    # The periodic check is an hour away: only the dispatchers' word that
    # they went quiet (a short claim, the last attempt closed) ends the run.
    from awa_django.runtime.process import worker as worker_module

    monkeypatch.setattr(worker_module, "BURST_CHECK_INTERVAL", 3600.0)
    enqueue(in_place.using(queue=queue), 30)
    worker = run_burst(queue, timeout=30, max_workers=8, claim_batch_size=8)
    assert worker.completed == 30


@job(kind="tests.groups.plain")
def plain(n: int = 0) -> int:
    return n


def test_plain_functions_run_on_threads_without_a_task_each(queue, monkeypatch):
    # Each result comes back from its thread into a completion group: the
    # worker creates tasks for its services and its claims, not per job.
    import asyncio.base_events

    created = 0
    original = asyncio.base_events.BaseEventLoop.create_task

    def counting(self, coro, **kwargs):
        nonlocal created
        created += 1
        return original(self, coro, **kwargs)

    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "create_task", counting)
    enqueue(plain.using(queue=queue), 300)
    worker = run_burst(queue, max_workers=100, claim_batch_size=100)

    assert worker.completed == 300
    assert worker.completer.stale == 0
    assert created < 100, created
