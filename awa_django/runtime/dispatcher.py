"""Per-queue dispatcher: pre-acquire permits, claim a batch, run it.

Loop: wait for one free permit, take every other free permit up to
``claim_batch_size``, claim that many jobs in one round trip, hand back the
permits the claim did not use, and start one task per claimed job.  A job's
permit is released only after its completion is durable.  When a claim
comes back short the queue is drained for now: the dispatcher sleeps until
a NOTIFY on the queue's channel or ``poll_interval``, whichever comes first.

Stopping is cooperative: the dispatcher checks ``stopping`` between claims
and never abandons a claim statement half way (an interrupted claim could
commit receipts nobody runs).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import UTC, datetime

from psycopg_pool import AsyncConnectionPool

from ..context import JobContext
from ..storage.attempts import ClaimedJob, claim
from .completer import InlineCompleter
from .config import QueuePolicy
from .executor import Executor, context_for
from .permits import Permits

log = logging.getLogger("awa_django.worker")

CLAIM_ERROR_DELAY = 1.0


class TokenBucket:
    """``rate_limit = (max_rate, burst)``: how many jobs may start now."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._at = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        self._refill()
        return int(self._tokens)

    def take(self, count: int) -> None:
        self._tokens -= count

    def wait_time(self) -> float:
        self._refill()
        return max(0.0, (1 - self._tokens) / self.rate)


def _cancel_all(contexts: list[JobContext]) -> None:
    for ctx in contexts:
        ctx.cancel()


class Dispatcher:
    def __init__(
        self,
        policy: QueuePolicy,
        *,
        pool: AsyncConnectionPool,
        executor: Executor,
        completer: InlineCompleter,
        runtime_id: uuid.UUID,
        wakeup: asyncio.Event,
        stopping: asyncio.Event,
    ) -> None:
        self.policy = policy
        self.permits = Permits(policy.max_workers)
        self._pool = pool
        self._executor = executor
        self._completer = completer
        self._runtime_id = runtime_id
        self._wakeup = wakeup
        self._stopping = stopping
        self._bucket = TokenBucket(*policy.rate_limit) if policy.rate_limit else None
        self.inflight: dict[tuple[int, int], tuple[ClaimedJob, JobContext, asyncio.Task]] = {}
        self.last_claim_empty = False

    async def _wait(self, awaitable, timeout: float | None = None) -> bool:
        """Wait for ``awaitable`` unless stopping first; True if it finished."""
        waiter = asyncio.ensure_future(awaitable)
        stopper = asyncio.ensure_future(self._stopping.wait())
        done, _ = await asyncio.wait(
            {waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        for task in (waiter, stopper):
            if task not in done:
                task.cancel()
        return waiter in done

    async def claim_once(self) -> list[ClaimedJob]:
        """Claim as many jobs as there are free permits (at least one)."""
        wanted = 1 + self.permits.take_up_to(self.policy.claim_batch_size - 1)
        if self._bucket is not None:
            allowed = min(wanted, self._bucket.available())
            self.permits.release(wanted - allowed)
            wanted = allowed
            if wanted == 0:
                return []
        try:
            async with self._pool.connection() as conn:
                jobs = await claim(
                    conn,
                    self.policy.name,
                    wanted,
                    self._runtime_id,
                    self.policy.deadline,
                    self.policy.aging_interval,
                )
        except BaseException:
            self.permits.release(wanted)
            raise
        self.permits.release(wanted - len(jobs))
        if self._bucket is not None:
            self._bucket.take(len(jobs))
        self.last_claim_empty = len(jobs) < wanted
        create_task = asyncio.get_running_loop().create_task
        contexts = []
        for job in jobs:
            ctx = context_for(job)
            contexts.append(ctx)
            task = create_task(self._run_job(job, ctx))
            self.inflight[(job.job_id, job.run_lease)] = (job, ctx, task)
        if jobs and jobs[0].deadline_at is not None:
            # One timer per claim (its jobs share the deadline): tell the
            # handlers still running when it passes.  The leader's deadline
            # rescue closes the attempts themselves.
            delay = (jobs[0].deadline_at - datetime.now(UTC)).total_seconds()
            asyncio.get_running_loop().call_later(max(delay, 0), _cancel_all, contexts)
        return jobs

    async def run(self) -> None:
        while not self._stopping.is_set():
            if not await self._wait(self.permits.acquire()):
                return
            self._wakeup.clear()
            try:
                jobs = await self.claim_once()
            except Exception as exc:
                log.warning("claim on queue %s failed: %s", self.policy.name, exc)
                await self._wait(asyncio.sleep(CLAIM_ERROR_DELAY))
                continue
            if self._bucket is not None and not jobs and self._bucket.available() == 0:
                await self._wait(asyncio.sleep(self._bucket.wait_time()))
            elif self.last_claim_empty:
                await self._wait(self._wakeup.wait(), timeout=self.policy.poll_interval)

    async def _run_job(self, job: ClaimedJob, ctx: JobContext) -> None:
        try:
            closure = await self._executor.run(job, ctx, dlq=self.policy.dlq)
            applied = await self._completer.submit(closure)
            if applied:
                log.info(
                    "job %s (%s) attempt %s -> %s",
                    job.job_id,
                    job.kind,
                    job.attempt,
                    closure.outcome,
                )
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("job %s (%s): could not record its outcome", job.job_id, job.kind)
        finally:
            self.inflight.pop((job.job_id, job.run_lease), None)
            self.permits.release()
