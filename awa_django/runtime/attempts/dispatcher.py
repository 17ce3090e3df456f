"""Per-queue dispatcher: pre-acquire permits, claim a batch, run it.

Loop: wait for one free permit, take every other free permit up to
``claim_batch_size``, claim that many jobs in one round trip, hand back the
permits the claim did not use, and run the claimed jobs (one task for the
claim; a job that has to wait gets its own).  A job's permit is released
when its handler has finished and its closure is handed to the completer,
so the next claim can run while those closures are being written: the
database then claims and closes at once while the worker runs jobs, instead
of each waiting for the other.  Closures not yet durable are bounded: a
queue with more than ``max_workers`` closures waiting to be written claims
nothing until a flush lands (so at most twice ``max_workers`` attempts are
between their claim and their durable close).  When a claim comes back short the queue is drained
for now: the dispatcher sleeps until a NOTIFY on the queue's channel or
``poll_interval``, whichever comes first.

Woken by a NOTIFY, it waits a short back-off before claiming, and a rate
limit (this process's, or the fleet's, kept in the database) caps what it
claims: both are :mod:`.pacing`.  Closing what was claimed -- handing
closures to the completer and freeing permits -- is :mod:`.closing`.

A queue's ``claimers`` option runs that many such claim loops in the
process.  They share the queue's permits (a loop claims only for permits it
took, so no more jobs run than there are permits), its rate limiter (a
claim reserves its tokens before the statement and gives back those it did
not use) and its in-flight set.

A striped queue (``QUEUE_STRIPE_COUNT`` > 1) is claimed over all its
stripes in one statement, each claim starting one stripe further on
(:class:`~awa_django.domain.stripes.Rotation`): the dispatcher, its permits and its
limits stay those of the logical queue.

The policy can change while the dispatcher runs (:meth:`Dispatcher.apply`,
a live override): the claim batch and the deadline apply from the next
claim, ``max_workers`` resizes the permits, the rate limiter is retuned,
and loops that sleep wake up to use the new poll interval.

Stopping is cooperative: the dispatcher checks ``stopping`` between claims
and never abandons a claim statement half way (an interrupted claim could
commit receipts nobody runs).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from ...context import JobContext
from ...domain.records import ClaimedJob, Closure
from ...domain.stripes import Rotation
from ...jobs import Job
from ...observability.hooks import observers
from ...storage import AsyncRunner
from ...storage import rate as rate_store
from ...storage.attempts import claim, claim_nonce
from ..completion.completer import Completer
from ..completion.leases import LeaseHub
from ..config import QueuePolicy
from . import eager
from .atomic import Settled
from .attempt import MustWait, definition_for, finish, step
from .closing import ClaimBatch, Closer, _ThreadAttempt
from .executor import Executor, context_for
from .pacing import TokenBucket, WakeupBackoff, fleet_rate, local_rate
from .permits import Permits, SharedPermits
from .pickup import PickupTrace

log = logging.getLogger("awa_django.worker")

CLAIM_ERROR_DELAY = 1.0
# Wait after a NOTIFY before claiming (seconds) while notified claims find
# work: none, so a job waits for nothing.  Jobs enqueued while a claim runs
# share the next claim anyway.
WAKEUP_DEBOUNCE = 0.0
# Wait after a keyed attempt closed before claiming again (seconds), so the
# closes of one completion flush free their slots for one claim.
SLOT_FREED_DELAY = 0.002


class Dispatcher(Closer):
    """One queue's claim loops, and the attempts they claimed until closed."""

    def __init__(
        self,
        policy: QueuePolicy,
        *,
        runner: AsyncRunner,
        executor: Executor,
        completer: Completer,
        runtime_id: uuid.UUID,
        wakeup: asyncio.Event,
        stopping: asyncio.Event,
        leases: LeaseHub | None = None,
        permits: Permits | SharedPermits | None = None,
        stripes: Sequence[str] = (),
        idle: asyncio.Event | None = None,
        trace: PickupTrace | None = None,
    ) -> None:
        self.policy = policy
        #: The physical queues claims visit (the queue's stripes, if any).
        self.stripes = Rotation(stripes or (policy.name,))
        self._leases = leases
        self.permits = permits if permits is not None else Permits(policy.max_workers)
        #: Claim loops of this queue (the ``claimers`` option; fixed at start).
        self.claimers = policy.queue.claimers
        self._run = runner
        self._executor = executor
        self._completer = completer
        self._runtime_id = runtime_id
        self._wakeup = wakeup
        self._stopping = stopping
        # Set whenever the queue may have gone quiet here (a claim came back
        # short, or the last attempt in flight finished): ``--burst`` checks
        # then instead of on its next tick.
        self._quiet = idle if idle is not None else asyncio.Event()
        # Set when an attempt with a concurrency key closed: its slot is
        # free, so a job of that key held aside may be claimable now.
        self._slot_freed = asyncio.Event()
        rate = local_rate(policy)
        self._bucket = TokenBucket(rate.max_rate, rate.burst) if rate else None
        # A fleet-wide limit (rate_limit_scope "fleet"): tokens come from the
        # database; when it had none, how long until the next one is due.
        self._fleet_wait = 0.0
        # Closures of thread results that came back in one bunch, to close
        # together once the bunch has been taken (see _flush_threads).
        self._from_threads: list[tuple[_ThreadAttempt, Closure]] = []
        # Closures handed to the completer and not yet durable (their jobs'
        # permits are free again); set after each flush.
        self._unflushed = 0
        self._flushed = asyncio.Event()
        self.inflight: dict[
            tuple[int, int, int], tuple[ClaimedJob, JobContext, asyncio.Future[None]]
        ] = {}
        # Nonces of the claims between their statement and the registration
        # of their jobs in ``inflight`` (see _claim).
        self.claiming: set[int] = set()
        # Per claim loop: whether its last claim came back short.
        self._short = [False] * self.claimers
        # Claim statements issued, and those that returned no job: with
        # ``completed`` they give claims per job, the cost of idle wake-ups.
        self.claims = 0
        self.empty_claims = 0
        # Once every job here has submitted its closure, the completer
        # flushes at once instead of waiting for batch-mates that cannot come.
        completer.track(lambda: len(self.inflight))
        self.backoff = WakeupBackoff(WAKEUP_DEBOUNCE, policy.queue.poll_interval)
        self._notified = [False] * self.claimers  # a loop's next claim answers a NOTIFY
        # Set (and replaced) by apply(): sleeping loops wake to the new policy.
        self._retuned = asyncio.Event()
        # Readings of wake-ups and claims (awa_bench's hop breakdown); None: off.
        self._trace = trace

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def last_claim_empty(self) -> bool:
        """Whether the last claim of every loop came back short (the queue is drained)."""
        return all(self._short)

    def apply(self, policy: QueuePolicy) -> None:
        """Run with ``policy`` from now on (a live override of this queue's options).

        The batch size and deadline apply from the next claim (jobs already
        claimed keep their deadline), ``max_workers`` resizes the permits
        (shrinking lets running jobs finish), the rate limiter keeps its
        saved tokens under the new burst, and sleeping loops wake up so a
        new poll interval takes effect at once.
        """
        old, self.policy = self.policy, policy
        if policy.max_workers != old.max_workers:
            self.permits.resize(policy.max_workers)
        rate = local_rate(policy)
        if rate != local_rate(old):
            if rate is None:
                self._bucket = None
            elif self._bucket is None:
                self._bucket = TokenBucket(rate.max_rate, rate.burst)
            else:
                self._bucket.retune(rate.max_rate, rate.burst)
        self.backoff.retune(policy.queue.poll_interval)
        retuned, self._retuned = self._retuned, asyncio.Event()
        retuned.set()

    async def _wait(self, *awaitables: Awaitable[object], timeout: float | None = None) -> int:
        """Wait for the first of ``awaitables`` unless stopping first.

        Returns the index of the one that finished, -1 on timeout or stop.
        """
        waiters = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
        stopper = asyncio.ensure_future(self._stopping.wait())
        done, _ = await asyncio.wait(
            {*waiters, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        for task in (*waiters, stopper):
            if task not in done:
                task.cancel()
        return next((i for i, waiter in enumerate(waiters) if waiter in done), -1)

    async def claim_once(self) -> list[ClaimedJob]:
        """Claim as many jobs as there are free permits (at least one)."""
        return await self._claim(0)

    async def _claim(self, loop: int) -> list[ClaimedJob]:
        # Known before the statement and until its jobs are registered in
        # flight: the heartbeat never takes a receipt of a claim still on its
        # way here for an orphan (its response may be late, or, under a
        # fleet rate limit, the refund of unused tokens comes first).
        nonce = claim_nonce()
        self.claiming.add(nonce)
        try:
            return await self._claim_as(loop, nonce)
        finally:
            self.claiming.discard(nonce)

    async def _claim_as(self, loop: int, nonce: int) -> list[ClaimedJob]:
        wanted = 1 + self.permits.take_up_to(self.policy.claim_batch_size - 1)
        fleet = fleet_rate(self.policy)
        if fleet is not None:
            try:
                granted, self._fleet_wait = await self._run(
                    rate_store.take(self.policy.name, wanted, fleet.max_rate, fleet.burst)
                )
            except BaseException:
                self.permits.release(wanted)
                raise
            self.permits.release(wanted - granted)
            wanted = granted
            if wanted == 0:
                return []
        bucket = self._bucket
        if bucket is not None:
            allowed = min(wanted, bucket.available())
            self.permits.release(wanted - allowed)
            wanted = allowed
            if wanted == 0:
                return []
            # Reserved before the statement: the other loops see them taken.
            bucket.take(wanted)
        began = time.perf_counter()
        try:
            queue = self.policy.queue
            jobs = await self._run(
                claim(
                    queue.name,
                    wanted,
                    self._runtime_id,
                    queue.deadline,
                    queue.priority_aging_interval,
                    self.stripes.next(),
                    nonce,
                )
            )
        except BaseException:
            self.permits.release(wanted)
            if bucket is not None:
                bucket.refund(wanted)
            raise
        if observers.active:
            observers.claimed(self.policy.name, wanted, len(jobs), time.perf_counter() - began)
        if self._trace is not None:
            self._trace.claimed(self._wakeup, loop, jobs, began, time.perf_counter())
        self._count_claim(loop, len(jobs))
        self.permits.release(wanted - len(jobs))
        if bucket is not None:
            bucket.refund(wanted - len(jobs))
        refund = wanted - len(jobs) if fleet is not None else 0
        self._short[loop] = len(jobs) < wanted
        if self._short[loop]:
            self._quiet.set()
        self.permits.busy(not self._short[loop])
        if not jobs:
            if refund:
                await self._refund_fleet(refund)
            return jobs
        event_loop = asyncio.get_running_loop()
        batch = ClaimBatch([context_for(job, self._leases) for job in jobs])
        deadline_at = jobs[0].deadline_at
        if deadline_at is not None:
            delay = (deadline_at - datetime.now(UTC)).total_seconds()
            batch.timer = event_loop.call_later(max(delay, 0), batch.expire)
        # One task runs the whole claim (see _run_batch); an attempt that
        # has to wait gets a task of its own there.
        task = event_loop.create_task(self._run_batch(jobs, batch))
        inflight = self.inflight
        for job, ctx in zip(jobs, batch.contexts, strict=True):
            inflight[(job.job_id, job.run_lease, job.claim_nonce)] = (job, ctx, task)
        if refund:
            # After the registration: whatever becomes of the refund, the
            # jobs claimed run and their permits come back.
            await self._refund_fleet(refund)
        return jobs

    async def _refund_fleet(self, count: int) -> None:
        """Give back ``count`` fleet rate tokens a claim took and did not use.
        A failure is logged, not raised: the fleet then runs that many
        fewer jobs until its bucket refills."""
        fleet = fleet_rate(self.policy)
        if fleet is None:  # an override lifted it meanwhile
            return
        try:
            await self._run(rate_store.refund(self.policy.name, count, fleet.burst))
        except Exception as exc:
            log.warning(
                "queue %s: could not give back %s unused fleet rate tokens: %s",
                self.policy.name,
                count,
                exc,
            )

    def _count_claim(self, loop: int, claimed: int) -> None:
        """Count a claim statement; a notified one (or any that found work)
        also tunes the wake-up back-off.  An idle poll finding nothing does
        not: it says nothing about other workers."""
        self.claims += 1
        if not claimed:
            self.empty_claims += 1
        if claimed or self._notified[loop]:
            self.backoff.claimed(claimed)
        self._notified[loop] = False

    async def run(self) -> None:
        """Run the queue's claim loops until stopping."""
        if self.claimers == 1:
            await self._claim_loop(0)
            return
        loops = [
            asyncio.create_task(self._claim_loop(n), name=f"awa-claim-{self.name}-{n}")
            for n in range(self.claimers)
        ]
        try:
            await asyncio.gather(*loops)
        finally:
            for task in loops:
                task.cancel()

    async def _claim_loop(self, loop: int) -> None:
        while not self._stopping.is_set():
            if await self._wait(self.permits.acquire()) < 0:
                return
            if self._unflushed > self.permits.total:
                # More closures wait to be written than jobs may run: no
                # more claims until a flush lands.
                self.permits.release()
                self._flushed.clear()
                if await self._wait(self._flushed.wait()) < 0:
                    return
                continue
            self._wakeup.clear()
            self._slot_freed.clear()
            try:
                jobs = await self._claim(loop)
            except Exception as exc:
                log.warning("claim on queue %s failed: %s", self.policy.name, exc)
                await self._wait(asyncio.sleep(CLAIM_ERROR_DELAY))
                continue
            bucket = self._bucket
            if bucket is not None and not jobs and bucket.available() == 0:
                await self._wait(asyncio.sleep(bucket.wait_time()), self._retuned.wait())
            elif not jobs and self._fleet_wait > 0:
                wait, self._fleet_wait = self._fleet_wait, 0.0
                await self._wait(asyncio.sleep(wait), self._retuned.wait())
            elif self._short[loop]:
                await self._idle(loop)

    async def _idle(self, loop: int) -> None:
        """Sleep until a NOTIFY or the poll interval; after a NOTIFY, wait the
        back-off delay too, so whatever is notified meanwhile shares the claim.
        A policy change ends the sleep (the next claim uses it); so does the
        close of an attempt with a concurrency key, which cuts the back-off
        short (its key may have a held job to hand out)."""
        poll = self.policy.queue.poll_interval
        woken = await self._wait(
            self._wakeup.wait(), self._retuned.wait(), self._slot_freed.wait(), timeout=poll
        )
        if woken == 0:
            self._notified[loop] = True
            if self._trace is not None:
                self._trace.woken(self._wakeup, loop)
            pause = self.backoff.delay()
            if pause > 0 and await self._wait(asyncio.sleep(pause), self._slot_freed.wait()) == 1:
                woken = 2
        if woken == 2:
            # A concurrency slot came free here: claim again soon, not after
            # the NOTIFY back-off (empty claims of a busy key raise it), with
            # a pause for the closes flushed together to free theirs too.
            await self._wait(asyncio.sleep(SLOT_FREED_DELAY))

    async def _run_batch(self, jobs: list[ClaimedJob], batch: ClaimBatch) -> None:
        """Run the attempts of one claim, and close those that finished together.

        Each attempt is started at once in a task of its own
        (:func:`.eager.start`, Python 3.12+): one whose handler returns
        without waiting -- most short ``async def`` jobs -- is done there,
        and the closures of all such attempts go to the completer as one
        group.  An attempt that waits (an async handler
        awaiting I/O, a callback registration) carries on in a task of its
        own (:meth:`_finish`), closed on its own.  A plain function goes to
        a handler thread, whose result comes back to
        :meth:`_thread_finished` and closes with those that came back with
        it.
        """
        executor = self._executor
        run, on_a_thread = executor.run, executor.on_a_thread
        policy = self.policy
        dlq, long_running = policy.dlq, policy.queue.long_running
        loop = asyncio.get_running_loop()
        create_task = loop.create_task
        inflight = self.inflight
        finished: list[tuple[ClaimedJob, Closure]] = []
        began = time.perf_counter()
        for job, ctx in zip(jobs, batch.contexts, strict=True):
            definition = definition_for(job, dlq=dlq)
            if type(definition) is Closure:  # no handler can run it
                finished.append((job, definition))
                continue
            definition = cast("Job[..., Any]", definition)
            if not long_running and on_a_thread(definition):
                # A plain function: its thread hands the result back to
                # _thread_finished, which closes it with its batch-mates.
                attempt = _ThreadAttempt(self, job, ctx, batch, definition, began, loop)
                inflight[(job.job_id, job.run_lease, job.claim_nonce)] = (job, ctx, attempt.done)
                executor.start_on_thread(definition, job, ctx, attempt)
                continue
            try:
                done, value = eager.start(
                    run(job, ctx, dlq=dlq, long_running=long_running, definition=definition)
                )
            except BaseException as exc:
                # The handler's own doing (this loop has no await: the claim's
                # task cannot be cancelled here); its batch-mates still run.
                if not isinstance(exc, asyncio.CancelledError):
                    log.exception("job %s (%s): could not run its attempt", job.job_id, job.kind)
                self._forget(job, batch)
                continue
            if not done:
                rest = cast("Awaitable[Closure | Settled | None]", value)
                task = create_task(self._finish(job, ctx, batch, rest, began))
                inflight[(job.job_id, job.run_lease, job.claim_nonce)] = (job, ctx, task)
            elif type(value) is Closure:
                finished.append((job, value))
            else:
                self._kept(job, cast("Settled | None", value), batch, began)
        if finished:
            await self._close_group(finished, batch, began)

    def _thread_finished(
        self, attempt: _ThreadAttempt, value: Any, error: BaseException | None
    ) -> None:
        """On the loop: a handler thread's result.  Its closure, made at once
        (no coroutine, no task), joins the others that came back in the same
        bunch, closed together (see :meth:`_flush_threads`); one that has to
        wait (a callback to park on) carries on in a task."""
        job, ctx, batch = attempt.job, attempt.ctx, attempt.batch
        try:
            dlq = attempt.definition.dlq_for(job.metadata, self.policy.dlq)
            end = step(job, ctx, value, error, dlq=dlq)
        except BaseException:
            log.exception("job %s (%s): could not record its outcome", job.job_id, job.kind)
            self._forget(job, batch)
            attempt.settle()
            return
        if end is MustWait:
            # A callback to park on, or a registration still settling: that
            # waits on the database, in a task of its own.
            rest = finish(job, ctx, value, error, dlq=dlq)
            task = asyncio.get_running_loop().create_task(
                self._finish(job, ctx, batch, rest, attempt.began)
            )
            self.inflight[(job.job_id, job.run_lease, job.claim_nonce)] = (job, ctx, task)
            attempt.settle()
            return
        if not self._from_threads:
            asyncio.get_running_loop().call_soon(self._flush_threads)
        self._from_threads.append((attempt, cast("Closure", end)))
