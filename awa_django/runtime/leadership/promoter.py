"""Promotion of due deferred jobs (scheduled, retry backoff, snooze).

The maintenance leader runs it on ``PROMOTE_INTERVAL``; a ``--burst``
worker also calls :meth:`Promoter.run_once` before deciding its queues are
empty, so a burst run drains due retries without waiting for a leader.
``awa.promote_due`` takes rows with SKIP LOCKED, so promoters never collide.
"""

from __future__ import annotations

from ...storage import AsyncRunner
from ...storage.attempts import promote_due
from ..config import PROMOTE_BATCH, PeriodicConfig
from ..service import PeriodicService


class Promoter(PeriodicService[int]):
    name = "promote"
    run_at_start = True

    def __init__(
        self, config: PeriodicConfig, runner: AsyncRunner, batch_size: int = PROMOTE_BATCH
    ) -> None:
        super().__init__(config)
        self._run = runner
        self.batch_size = batch_size

    async def run_once(self) -> int:
        """Promote everything due now, in batches; returns how many moved."""
        return await self._run(promote_due(self.batch_size))
