"""Runtime services driven through ``run_once()``: no loop, no sleeping.

Completers (inline and batching) report each flush to their listeners,
stale closures included; the heartbeat cancels attempts closed elsewhere;
the progress flusher writes only what changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from django.db import connection
from psycopg_pool import AsyncConnectionPool

from awa_django import ops
from awa_django.domain.closures import completed
from awa_django.runtime.attempts.executor import context_for
from awa_django.runtime.completion.completer import BatchCompleter, Completer, CompletionEvent
from awa_django.runtime.completion.heartbeat import Heartbeat
from awa_django.runtime.completion.progress import ProgressFlusher
from awa_django.runtime.config import CompleterConfig, PeriodicConfig
from awa_django.storage import AsyncRunner, runtimes
from awa_django.storage.attempts import claim, close_attempts, record_progress
from awa_django.storage.connection import conninfo
from tests.factories import JobFactory, closure_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


async def with_runner(scenario):
    async with AsyncConnectionPool(conninfo(), kwargs={"autocommit": True}, open=False) as pool:
        return await scenario(AsyncRunner(pool))


def test_completers_report_applied_and_stale_closures_to_listeners(queue):
    made = [JobFactory(queue=queue) for _ in range(3)]
    seen: list[list[CompletionEvent]] = []

    async def scenario(run: AsyncRunner):
        jobs = await run(claim(queue, 10, uuid.uuid4(), 300.0, 0.0))
        inline = Completer(run)
        batch = BatchCompleter(CompleterConfig(batch_size=2, flush_interval=0), run)
        for completer in (inline, batch):
            completer.subscribe(seen.append)
        assert await inline.submit(completed(jobs[0], "first")) is True
        await batch.start()
        both = [batch.submit(completed(job, None)) for job in jobs[1:]]
        assert await asyncio.gather(*both) == [True, True]
        await batch.stop()
        assert await inline.submit(completed(jobs[0], "late")) is False
        return inline, batch

    inline, batch = asyncio.run(with_runner(scenario))
    flushed = [(event.closure.job_id, event.applied) for events in seen for event in events]
    first, second, third = (job.id for job in made)
    assert sorted(flushed[1:3]) == [(second, True), (third, True)]
    assert (flushed[0], flushed[3:]) == ((first, True), [(first, False)])
    assert (inline.applied, inline.stale, batch.applied, batch.stale) == (1, 1, 2, 0)


def test_heartbeat_cancels_attempts_closed_elsewhere(queue):
    JobFactory(queue=queue)

    async def scenario(run: AsyncRunner):
        runtime = uuid.uuid4()
        [job] = await run(claim(queue, 1, runtime, 300.0, 0.0))
        ctx = context_for(job)
        beat = Heartbeat(PeriodicConfig(30.0), run, runtime, lambda: [(job, ctx)])
        await beat.register([queue], 1)
        assert await beat.run_once() == {"cancelled": 0, "handed_back": 0}
        assert not ctx.is_cancelled()
        await run(close_attempts([closure_for(job, "cancelled")]))  # e.g. an operator
        assert (await beat.run_once())["cancelled"] == 1
        await beat.unregister()
        return ctx

    ctx = asyncio.run(with_runner(scenario))
    assert ctx.is_cancelled()


def test_a_runtime_whose_row_was_removed_registers_again(queue):
    # Cleanup removes a runtime silent for long (a stopped process, a cut
    # network); when it resumes, its next heartbeat puts the row back.
    async def scenario(run: AsyncRunner):
        runtime = uuid.uuid4()
        beat = Heartbeat(PeriodicConfig(30.0), run, runtime)
        await beat.register([queue], 1)
        await run(runtimes.unregister(runtime))
        await beat.run_once()
        found = [r for r in await run(runtimes.list_runtimes(90.0)) if r.id == runtime]
        await beat.unregister()
        return found

    [found] = asyncio.run(with_runner(scenario))
    assert (found.alive, found.queues, found.pid) == (True, [queue], 1)


def test_progress_is_written_once_per_change(queue):
    ref = JobFactory(queue=queue)

    async def scenario(run: AsyncRunner):
        [job] = await run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))
        ctx = context_for(job)
        flusher = ProgressFlusher(PeriodicConfig(1.0), run, lambda: [(job, ctx)])
        assert await flusher.run_once() == 0  # nothing reported yet
        ctx.set_progress(40, "reading")
        assert await flusher.run_once() == 1
        assert await flusher.run_once() == 0  # unchanged since
        ctx.set_progress(80)
        assert await flusher.run_once() == 1
        return job, ctx

    job, ctx = asyncio.run(with_runner(scenario))
    assert ops.get_job(ref.id).progress == {"percent": 80, "message": "reading"}

    async def close_then_report(run: AsyncRunner):
        assert await run(close_attempts([closure_for(job, "retryable")])) == {
            (job.job_id, job.run_lease)
        }
        ctx.set_progress(90)  # too late: the attempt is closed
        return await run(record_progress([(job, ctx.progress_snapshot()[1])]))

    assert asyncio.run(with_runner(close_then_report)) == set()
    info = ops.get_job(ref.id)
    # The retry keeps the last progress written; the attempt's state row is gone.
    assert (info.state, info.progress) == ("retryable", {"percent": 80, "message": "reading"})
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.attempt_state WHERE job_id = %s", [ref.id])
        assert cursor.fetchone()[0] == 0


def test_heartbeat_hands_back_receipts_it_does_not_run(queue):
    """A claim whose response was lost left receipts nobody runs."""
    held_ref, lost_ref = JobFactory(queue=queue), JobFactory(queue=queue)

    async def scenario(run: AsyncRunner):
        runtime = uuid.uuid4()
        held, lost = await run(claim(queue, 2, runtime, 0.0, 0.0))  # deadline 0: no rescue
        assert (held.job_id, lost.job_id) == (held_ref.id, lost_ref.id)
        ctx = context_for(held)
        beat = Heartbeat(PeriodicConfig(30.0), run, runtime, lambda: [(held, ctx)])
        await beat.register([queue], 1)
        # Younger than one interval: perhaps a claim still being dispatched.
        assert await beat.run_once() == {"cancelled": 0, "handed_back": 0}
        beat.config = PeriodicConfig(0.001)
        await asyncio.sleep(0.01)
        assert await beat.run_once() == {"cancelled": 0, "handed_back": 1}
        await beat.unregister()

    asyncio.run(with_runner(scenario))
    lost_info, held_info = ops.get_job(lost_ref.id), ops.get_job(held_ref.id)
    # Counted: a hand-back of the same attempt must not loop uncounted.
    assert (lost_info.state, lost_info.attempt) in {("available", 1), ("scheduled", 1)}
    assert held_info.state == "running"


def test_one_unwritable_closure_does_not_drop_its_batch_mates(queue):
    made = [JobFactory(queue=queue) for _ in range(5)]

    async def scenario(run: AsyncRunner):
        jobs = await run(claim(queue, 5, uuid.uuid4(), 300.0, 0.0))
        batch = BatchCompleter(CompleterConfig(batch_size=5, flush_interval=0.05), run)
        await batch.start()
        closures = [completed(job, None) for job in jobs]
        # Not JSON: the database refuses this one closure.
        closures[2] = dataclasses.replace(
            closure_for(jobs[2], "failed"), errors="{not json", target="failed"
        )
        results = await asyncio.gather(*(batch.submit(c) for c in closures), return_exceptions=True)
        await batch.stop()
        return results, batch

    results, batch = asyncio.run(with_runner(scenario))
    assert [r for i, r in enumerate(results) if i != 2] == [True] * 4
    assert isinstance(results[2], Exception)
    assert batch.applied == 4
    states = [ops.get_job(job.id).state for job in made]
    assert states == ["completed", "completed", "running", "completed", "completed"]
