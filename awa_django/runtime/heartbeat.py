"""Process heartbeat: one UPDATE per interval covers every receipt we own.

Short jobs therefore cost no per-job liveness write; the maintenance leader
rescues receipts whose runtime's heartbeat went stale.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Sequence

from psycopg_pool import AsyncConnectionPool

from ..storage import runtimes

log = logging.getLogger("awa_django.worker")


class Heartbeat:
    def __init__(self, pool: AsyncConnectionPool, runtime_id: uuid.UUID, interval: float) -> None:
        self._pool = pool
        self.runtime_id = runtime_id
        self.interval = interval

    async def register(self, queues: Sequence[str], pid: int) -> None:
        async with self._pool.connection() as conn:
            await runtimes.register(conn, self.runtime_id, socket.gethostname(), pid, queues)

    async def unregister(self) -> None:
        async with self._pool.connection() as conn:
            await runtimes.unregister(conn, self.runtime_id)

    async def run_once(self) -> None:
        async with self._pool.connection() as conn:
            await runtimes.heartbeat(conn, self.runtime_id)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
