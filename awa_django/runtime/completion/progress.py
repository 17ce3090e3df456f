"""Writes the progress handlers report, batched, while their attempts run.

Every interval the flusher collects each in-flight context whose progress
changed since the last write and records all of them in one
``awa.record_progress`` statement (guarded: closed attempts are skipped).
"""

from __future__ import annotations

from ...storage import AsyncRunner
from ...storage.attempts import record_progress
from ..config import PeriodicConfig
from ..service import PeriodicService
from .inflight import Inflight


class ProgressFlusher(PeriodicService[int]):
    name = "progress"

    def __init__(self, config: PeriodicConfig, runner: AsyncRunner, inflight: Inflight) -> None:
        super().__init__(config)
        self._run = runner
        self._inflight = inflight
        self._written: dict[tuple[int, int], int] = {}

    async def run_once(self) -> int:
        """Write every changed progress now; returns how many attempts were written."""
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
        await self._run(record_progress(entries))
        for job, _ in entries:
            key = (job.job_id, job.run_lease)
            self._written[key] = versions[key]
        return len(entries)
