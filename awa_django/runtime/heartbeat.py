"""Process heartbeat: one UPDATE per interval covers every receipt we own.

Short jobs therefore cost no per-job liveness write; the maintenance leader
rescues receipts whose runtime's heartbeat went stale.  The same tick asks
which of our in-flight attempts were closed by someone else (rescued,
cancelled) and sets their contexts' cancellation flag, so a handler that
polls ``ctx.is_cancelled()`` stops work nobody will accept any more.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Sequence

from ..storage import AsyncRunner, runtimes
from ..storage.attempts import closed_attempts
from .config import PeriodicConfig
from .inflight import Inflight, nothing_inflight
from .service import PeriodicService

log = logging.getLogger("awa_django.worker")


class Heartbeat(PeriodicService[int]):
    name = "heartbeat"

    def __init__(
        self,
        config: PeriodicConfig,
        runner: AsyncRunner,
        runtime_id: uuid.UUID,
        inflight: Inflight = nothing_inflight,
    ) -> None:
        super().__init__(config)
        self._run = runner
        self.runtime_id = runtime_id
        self._inflight = inflight

    async def register(self, queues: Sequence[str], pid: int) -> None:
        await self._run(runtimes.register(self.runtime_id, socket.gethostname(), pid, queues))

    async def unregister(self) -> None:
        await self._run(runtimes.unregister(self.runtime_id))

    async def run_once(self) -> int:
        """Refresh the heartbeat; returns how many in-flight attempts were cancelled."""
        running = {(job.job_id, job.run_lease): (job, ctx) for job, ctx in self._inflight()}
        await self._run(runtimes.heartbeat(self.runtime_id))
        closed = await self._run(closed_attempts([job for job, _ in running.values()]))
        for key in closed:
            job, ctx = running[key]
            if not ctx.is_cancelled():
                log.warning(
                    "job %s attempt %s was closed elsewhere; cancelling it", job.job_id, job.attempt
                )
                ctx.cancel()
        return len(closed)
