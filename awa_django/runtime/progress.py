"""Writes the progress handlers report, batched, while their attempts run.

Every ``interval`` the flusher collects each in-flight context whose
progress changed since the last write and records all of them in one
``awa.record_progress`` statement (guarded: closed attempts are skipped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from psycopg_pool import AsyncConnectionPool

from ..context import JobContext
from ..storage.attempts import ClaimedJob, record_progress

log = logging.getLogger("awa_django.worker")

FLUSH_INTERVAL = 1.0


class ProgressFlusher:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        inflight: Callable[[], Iterable[tuple[ClaimedJob, JobContext]]],
        interval: float = FLUSH_INTERVAL,
    ) -> None:
        self._pool = pool
        self._inflight = inflight
        self.interval = interval
        self._written: dict[tuple[int, int], int] = {}

    async def run_once(self) -> int:
        entries, versions = [], {}
        for job, ctx in self._inflight():
            key = (job.job_id, job.run_lease)
            version, text = ctx.progress_snapshot()
            versions[key] = version
            if text is not None and version > self._written.get(key, 0):
                entries.append((job, text))
        self._written = {key: self._written.get(key, 0) for key in versions}
        if not entries:
            return 0
        async with self._pool.connection() as conn:
            await record_progress(conn, entries)
        for job, _ in entries:
            key = (job.job_id, job.run_lease)
            self._written[key] = versions[key]
        return len(entries)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("progress flush failed: %s", exc)
