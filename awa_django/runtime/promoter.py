"""Promotion of due deferred jobs (scheduled, retry backoff, snooze).

This is the maintenance leader's task; until leader election exists every
worker runs it.  ``awa.promote_due`` takes rows with SKIP LOCKED, so any
number of promoters can run at once without double-promoting.
"""

from __future__ import annotations

import asyncio
import logging

from psycopg_pool import AsyncConnectionPool

from ..storage.attempts import promote_due

log = logging.getLogger("awa_django.worker")


class Promoter:
    def __init__(self, pool: AsyncConnectionPool, interval: float, batch_size: int = 1000) -> None:
        self._pool = pool
        self.interval = interval
        self.batch_size = batch_size

    async def run_once(self) -> int:
        """Promote everything due now, in batches; returns how many moved."""
        moved = 0
        async with self._pool.connection() as conn:
            while True:
                count = await promote_due(conn, self.batch_size)
                moved += count
                if count < self.batch_size:
                    return moved

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("promotion failed: %s", exc)
            await asyncio.sleep(self.interval)
