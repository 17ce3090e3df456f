"""Durable completion of attempts, batched.

Finished attempts are closed many at a time: the batcher collects closures
and flushes them in ONE ``awa.close_attempts`` statement when it has
``batch_size`` of them or ``flush_interval`` after the first one arrived
(defaults 512 / 1 ms).  Each submitter awaits its own result, so a worker
permit stays held until the completion is durable.

Every closure names its ``(job_id, run_lease)``; the SQL applies only the
ones whose attempt is still open and returns them.  The rest are stale (the
attempt was rescued, cancelled or handed back meanwhile): they are counted
in ``stale`` and logged, never applied.

:class:`InlineCompleter` is the unbatched twin with the same interface, for
tests and one-off paths.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..storage.attempts import Closure, close_attempts

log = logging.getLogger("awa_django.worker")

DEFAULT_BATCH_SIZE = 512
DEFAULT_FLUSH_INTERVAL = 0.001
RETRY_DELAY = 0.5


class InlineCompleter:
    """Closes each attempt immediately in its own statement."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self.applied = 0
        self.stale = 0

    async def submit(self, closure: Closure) -> bool:
        return (await self.submit_many([closure]))[0]

    async def submit_many(self, closures: Sequence[Closure]) -> list[bool]:
        async with self._pool.connection() as conn:
            won = await close_attempts(conn, closures)
        results = [(c.job_id, c.run_lease) in won for c in closures]
        self._count(closures, results)
        return results

    def _count(self, closures: Sequence[Closure], results: list[bool]) -> None:
        for closure, applied in zip(closures, results, strict=True):
            if applied:
                self.applied += 1
            else:
                self.stale += 1
                log.warning(
                    "job %s: stale completion rejected (run_lease %s was already closed)",
                    closure.job_id,
                    closure.run_lease,
                )

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class BatchCompleter(InlineCompleter):
    """Collects closures and writes them in batches."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        batch_size: int = DEFAULT_BATCH_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
    ) -> None:
        super().__init__(pool)
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._pending: list[tuple[Closure, asyncio.Future[bool]]] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    async def submit(self, closure: Closure) -> bool:
        if self._task is None or self._task.done():
            return await super().submit(closure)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((closure, future))
        self._arrived.set()
        return await future

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="awa-completer")

    async def stop(self) -> None:
        """Flush everything pending, then stop."""
        self._closing = True
        self._arrived.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def run_once(self) -> int:
        """Flush up to one batch now; returns how many closures were written."""
        batch, self._pending = (
            self._pending[: self.batch_size],
            self._pending[self.batch_size :],
        )
        if not batch:
            return 0
        closures = [closure for closure, _ in batch]
        while True:
            try:
                async with self._pool.connection() as conn:
                    won = await close_attempts(conn, closures)
                break
            except (psycopg.OperationalError, psycopg.errors.AdminShutdown) as exc:
                # The statement is idempotent per attempt: retrying after a
                # lost connection at worst reports our own closures as stale.
                log.warning("completion flush failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_DELAY)
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                return len(batch)
        results = [(c.job_id, c.run_lease) in won for c in closures]
        self._count(closures, results)
        for (_, future), applied in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(applied)
        return len(batch)

    async def _run(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            if len(self._pending) < self.batch_size and not self._closing:
                # Let the batch fill for up to one flush interval.
                await asyncio.sleep(self.flush_interval)
            while self._pending:
                await self.run_once()
            if self._closing:
                return
