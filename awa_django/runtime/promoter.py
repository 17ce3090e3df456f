"""Promotion of due deferred jobs (scheduled, retry backoff, snooze) on demand.

The maintenance leader promotes on its own schedule; a ``--burst`` worker
also calls :meth:`Promoter.run_once` before deciding its queues are empty, so
a burst run drains due retries without waiting for a leader.
``awa.promote_due`` takes rows with SKIP LOCKED, so promoters never collide.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from ..storage.attempts import promote_all_due


class Promoter:
    def __init__(self, pool: AsyncConnectionPool, batch_size: int = 1000) -> None:
        self._pool = pool
        self.batch_size = batch_size

    async def run_once(self) -> int:
        """Promote everything due now, in batches; returns how many moved."""
        async with self._pool.connection() as conn:
            return await promote_all_due(conn, self.batch_size)
