"""Process heartbeat: one UPDATE per interval covers every receipt we own.

Short jobs therefore cost no per-job liveness write; the maintenance leader
rescues receipts whose runtime's heartbeat went stale.  The same tick asks
which of our in-flight attempts were closed by someone else (rescued,
cancelled) and sets their contexts' cancellation flag, so a handler that
polls ``ctx.is_cancelled()`` stops work nobody will accept any more.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Callable, Iterable, Sequence

from psycopg_pool import AsyncConnectionPool

from ..context import JobContext
from ..storage import runtimes
from ..storage.attempts import ClaimedJob
from ..storage.maintenance import closed_attempts

log = logging.getLogger("awa_django.worker")


class Heartbeat:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        runtime_id: uuid.UUID,
        interval: float,
        inflight: Callable[[], Iterable[tuple[ClaimedJob, JobContext]]] = tuple,
    ) -> None:
        self._pool = pool
        self.runtime_id = runtime_id
        self.interval = interval
        self._inflight = inflight

    async def register(self, queues: Sequence[str], pid: int) -> None:
        async with self._pool.connection() as conn:
            await runtimes.register(conn, self.runtime_id, socket.gethostname(), pid, queues)

    async def unregister(self) -> None:
        async with self._pool.connection() as conn:
            await runtimes.unregister(conn, self.runtime_id)

    async def run_once(self) -> int:
        """Refresh the heartbeat; returns how many in-flight attempts were cancelled."""
        running = {(job.job_id, job.run_lease): (job, ctx) for job, ctx in self._inflight()}
        async with self._pool.connection() as conn:
            await runtimes.heartbeat(conn, self.runtime_id)
            closed = await closed_attempts(conn, [job for job, _ in running.values()])
        for key in closed:
            job, ctx = running[key]
            if not ctx.is_cancelled():
                log.warning(
                    "job %s attempt %s was closed elsewhere; cancelling it", job.job_id, job.attempt
                )
                ctx.cancel()
        return len(closed)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
