"""What the completer does when the database refuses a flush.

A lost connection, a server going away, a lost conflict or a transient
refusal (statement or lock timeout, class 53) is retried as it is, a bounded
number of times with backoff.  Past that, or on anything else -- a value the
database refuses -- the batch is split until the closures that fail alone
are found; their batch-mates are written, and each of them is replaced by
its fallback when one is given.

Real PostgreSQL: the timeout is a real ``statement_timeout`` on the
completer's connections, hit by a real row lock held by the test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from awa_django import Cancel, job, ops
from awa_django.domain.closures import UNSTORABLE, completed, unstorable
from awa_django.runtime.completion import flush_retry
from awa_django.runtime.completion.completer import MAX_RETRIES, BatchCompleter, Replaced
from awa_django.runtime.config import CompleterConfig
from awa_django.storage import AsyncRunner
from awa_django.storage.attempts import claim
from awa_django.storage.connection import conninfo
from tests.conftest import refusing, run_burst
from tests.factories import JobFactory, closure_for

pytestmark = pytest.mark.django_db(transaction=True)

#: Bounds a completer that would otherwise retry forever (the old behaviour).
GIVE_UP = 20.0


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def quick_retries(monkeypatch):
    """Retries as many, much sooner (the backoff is not what is tested)."""
    monkeypatch.setattr(flush_retry, "RETRY_DELAY", 0.01)
    monkeypatch.setattr(flush_retry, "MAX_RETRY_DELAY", 0.02)


async def with_runner(scenario, **options: str):
    """Run ``scenario(runner)`` on a pool whose sessions have these settings."""
    kwargs = {"autocommit": True}
    settings = " ".join(f"-c {key}={value}" for key, value in options.items())
    pool = AsyncConnectionPool(conninfo(), kwargs={**kwargs, "options": settings}, open=False)
    async with pool:
        return await scenario(AsyncRunner(pool))


@pytest.mark.needs_session  # the timeout is a session setting of the pool
def test_a_statement_timeout_is_not_retried_forever_the_batch_is_split(queue, quick_retries):
    """One attempt's claim row is locked by someone else: its close times out
    every time.  After its retries the batch is split: its batch-mate
    (another claim) is written; it gets the error."""
    stuck_ref, free_ref = JobFactory(queue=queue), JobFactory(queue=queue)

    async def scenario(run: AsyncRunner):
        runtime = uuid.uuid4()
        (stuck,) = await run(claim(queue, 1, runtime, 300.0, 0.0))
        (free,) = await run(claim(queue, 1, runtime, 300.0, 0.0))
        async with await psycopg.AsyncConnection.connect(conninfo()) as holder:
            await holder.execute(
                "SELECT 1 FROM awa.lease_claim_batches"
                " WHERE claim_slot = %s AND batch_id = %s FOR UPDATE",
                [stuck.claim_slot, stuck.batch_id],
            )
            batch = BatchCompleter(CompleterConfig(batch_size=2, flush_interval=1.0), run)
            await batch.start()
            outcomes = await asyncio.wait_for(
                batch.submit_group([completed(stuck, None), completed(free, None)]), GIVE_UP
            )
            await holder.rollback()
        await batch.stop()
        return outcomes, batch.retried

    (stuck_outcome, free_outcome), retried = asyncio.run(
        with_runner(scenario, statement_timeout="300ms")
    )
    assert retried == MAX_RETRIES
    assert isinstance(stuck_outcome, psycopg.errors.QueryCanceled)
    assert free_outcome is True
    assert ops.get_job(free_ref.id).state == "completed"
    assert ops.get_job(stuck_ref.id).state == "running"  # left open for its hand-back


def test_a_closure_the_database_refuses_is_replaced_by_its_fallback(queue):
    """Defence in depth: whatever the value that made a closure unwritable,
    the attempt ends (failed here, the DLQ on a queue that has one) instead
    of being dropped and handed back uncounted."""
    made = [JobFactory(queue=queue) for _ in range(4)]

    async def scenario(run: AsyncRunner):
        jobs = await run(claim(queue, 4, uuid.uuid4(), 300.0, 0.0))
        by_id = {job.job_id: job for job in jobs}
        batch = BatchCompleter(CompleterConfig(batch_size=4, flush_interval=1.0), run)
        batch.set_fallback(lambda c, exc: unstorable(by_id[c.job_id], c, exc, dlq=False))
        closures = [completed(job, None) for job in jobs]
        # Not JSON: the database refuses this closure, whatever is retried.
        closures[1] = dataclasses.replace(closure_for(jobs[1], "retryable"), errors="{not json")
        await batch.start()
        outcomes = await asyncio.wait_for(batch.submit_group(closures), GIVE_UP)
        await batch.stop()
        return outcomes, batch.replaced

    outcomes, replaced = asyncio.run(with_runner(scenario))
    assert outcomes[0] is outcomes[2] is outcomes[3] is True and replaced == 1
    # Its submitter learns what was stored instead (for signals and metrics).
    assert isinstance(outcomes[1], Replaced) and outcomes[1].applied
    assert outcomes[1].closure.target == "failed"
    infos = [ops.get_job(ref.id) for ref in made]
    assert [info.state for info in infos] == ["completed", "failed", "completed", "completed"]
    [error] = infos[1].errors
    assert error["type"] == UNSTORABLE and "retryable outcome" in error["message"]


@pytest.mark.needs_session  # the timeout is a session setting of the pool
@pytest.mark.parametrize("setting", ["statement_timeout", "lock_timeout"])
def test_a_timeout_that_passes_does_not_fail_a_job_that_succeeded(queue, setting):
    """A row lock held for a while makes the close time out (57014 or 55P03);
    it is retried with backoff, and once the lock is gone the completion is
    written.  It used to be taken for a refusal for good: replaced by its
    fallback, a job that succeeded ended failed."""
    ref = JobFactory(queue=queue)

    async def scenario(run: AsyncRunner):
        (job,) = await run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))
        batch = BatchCompleter(CompleterConfig(batch_size=1, flush_interval=1.0), run)
        batch.set_fallback(lambda c, exc: unstorable(job, c, exc, dlq=False))
        async with await psycopg.AsyncConnection.connect(conninfo()) as holder:
            await holder.execute(
                "SELECT 1 FROM awa.lease_claim_batches"
                " WHERE claim_slot = %s AND batch_id = %s FOR UPDATE",
                [job.claim_slot, job.batch_id],
            )
            await batch.start()
            submitted = asyncio.ensure_future(batch.submit_group([completed(job, None)]))
            while not (batch.retried or submitted.done()):  # the first try timed out
                await asyncio.sleep(0.01)
            await holder.rollback()
            outcomes = await asyncio.wait_for(submitted, GIVE_UP)
        await batch.stop()
        return outcomes, batch.replaced

    outcomes, replaced = asyncio.run(with_runner(scenario, **{setting: "200ms"}))
    assert outcomes == [True] and replaced == 0
    assert ops.get_job(ref.id).state == "completed"


def test_a_fallback_that_raises_still_answers_every_submitter(queue):
    """A bug in the fallback used to end the completer's loop: that batch's
    submitters never got an answer (their permits held) and ``flush()`` at
    shutdown waited for them forever."""
    made = [JobFactory(queue=queue) for _ in range(3)]

    def broken(closure, exc):
        raise RuntimeError("a bug in the fallback")

    async def scenario(run: AsyncRunner):
        jobs = await run(claim(queue, 3, uuid.uuid4(), 300.0, 0.0))
        batch = BatchCompleter(CompleterConfig(batch_size=3, flush_interval=1.0), run)
        batch.set_fallback(broken)
        closures = [completed(job, None) for job in jobs]
        closures[1] = dataclasses.replace(closure_for(jobs[1], "retryable"), errors="{not json")
        await batch.start()
        submitted = asyncio.ensure_future(batch.submit_group(closures))
        flushed = await asyncio.wait_for(batch.flush(), GIVE_UP)
        outcomes = await asyncio.wait_for(submitted, GIVE_UP)
        # The loop still runs: a later closure is written by it.
        (later_job,) = await run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))
        later = await asyncio.wait_for(batch.submit(completed(later_job, None)), GIVE_UP)
        await asyncio.wait_for(batch.stop(), GIVE_UP)
        return flushed, outcomes, later

    later_ref = JobFactory(queue=queue)
    flushed, outcomes, later = asyncio.run(with_runner(scenario))
    assert flushed is not False and later is True
    assert outcomes[0] is True and outcomes[2] is True
    assert isinstance(outcomes[1], psycopg.errors.InvalidTextRepresentation)
    states = [ops.get_job(ref.id).state for ref in made]
    assert states == ["completed", "running", "completed"]
    assert ops.get_job(later_ref.id).state == "completed"


def test_a_batch_that_keeps_losing_its_connection_is_not_retried_forever(queue, quick_retries):
    """Each time the close waits on a locked claim row, its backend is
    terminated (57P01): a connection lost during the statement, every time.
    It used to be retried as it was, forever; now it is retried a few
    times, then split, and the closure that fails alone gets the error."""
    ref = JobFactory(queue=queue)

    async def scenario(run: AsyncRunner):
        (job,) = await run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))
        batch = BatchCompleter(CompleterConfig(batch_size=1, flush_interval=1.0), run)
        async with (
            await psycopg.AsyncConnection.connect(conninfo()) as holder,
            await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as killer,
        ):
            await holder.execute(
                "SELECT 1 FROM awa.lease_claim_batches"
                " WHERE claim_slot = %s AND batch_id = %s FOR UPDATE",
                [job.claim_slot, job.batch_id],
            )
            await batch.start()
            submitted = asyncio.ensure_future(batch.submit_group([completed(job, None)]))
            async with asyncio.timeout(GIVE_UP):
                while not submitted.done():  # end every close that waits on the lock
                    await killer.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                    await asyncio.sleep(0.02)
            await holder.rollback()
        await batch.stop()
        return submitted.result(), batch.retried

    (outcome,), retried = asyncio.run(with_runner(scenario))
    assert isinstance(outcome, psycopg.OperationalError)
    assert retried == MAX_RETRIES
    assert ops.get_job(ref.id).state == "running"  # left open for its hand-back


@job(kind="tests.completer.returns")
def returns() -> str:
    return "done"


@job(kind="tests.completer.cancels")
def cancels() -> None:
    raise Cancel("refuse me")


def test_a_completion_refused_for_another_reason_is_retried_while_attempts_remain(queue, raw_conn):
    """Not a refused value (P0001, raised by a trigger): the fallback is a
    retry, as if the handler had raised, not a final failure."""
    ref = returns.using(queue=queue, max_attempts=3).enqueue()
    when = f"NEW.queue = '{queue}'"
    with refusing(
        raw_conn, "test_refuse", "INSERT ON awa.receipt_completion_batches", when, "P0001"
    ):
        worker = run_burst(queue, timeout=GIVE_UP)

    info = ops.get_job(ref.id)
    assert worker.completer.replaced == 1
    assert (info.state, info.attempt) == ("retryable", 1)
    assert info.errors[-1]["type"] == UNSTORABLE


def test_a_refused_cancellation_stays_a_cancellation(queue, raw_conn):
    """The cancel's own entry is refused (a trigger): it is written without
    it, still cancelled, rather than failed or dead-lettered."""
    ref = cancels.using(queue=queue).enqueue()
    when = "NEW.state = 'cancelled' AND NEW.errors::text LIKE '%refuse me%'"
    with refusing(raw_conn, "test_refuse", "INSERT ON awa.done_entries", when):
        worker = run_burst(queue, timeout=GIVE_UP)

    info = ops.get_job(ref.id)
    assert worker.completer.replaced == 1
    assert info.state == "cancelled"
    assert info.errors[-1]["type"] == UNSTORABLE
