"""Process heartbeat: one UPDATE per interval covers every receipt we own.

Short jobs therefore cost no per-job liveness write; the maintenance leader
rescues receipts whose runtime's heartbeat went stale.  The same tick asks
which of our in-flight attempts were closed by someone else (rescued,
cancelled) or never committed (a claim that a server crash reverted: its
nonce matches no surviving batch) and sets their contexts' cancellation
flag, so a handler that polls ``ctx.is_cancelled()`` stops work nobody will
accept any more.

Each tick also refreshes the descriptors this worker declares (their
``last_seen_at`` and the hashes on its runtime row), which is what the
console's stale and drift flags read.

A runtime whose row is gone registers again.  Cleanup removes the rows of
runtimes silent for several staleness periods; a process that was stopped
(SIGSTOP, a paused VM) or cut off that long and then resumes would
otherwise heartbeat nothing, and every attempt it claims would look
abandoned at once.

It also hands back orphaned receipts: open receipts of this runtime that
it does not run.  A claim can commit while its response is lost (the
connection dropped on the way back), and nothing would ever close those
attempts -- stale-heartbeat rescue skips a live runtime, and a queue with
``deadline=0`` has no deadline rescue -- so they would stay open and pin
both rings.  Receipts younger than one heartbeat interval are left alone,
and so are those of a claim a dispatcher still has on its way (its nonce is
in ``claiming`` from before the statement until its jobs are registered in
flight): a claim whose response is late is not orphaned however old its
``claimed_at`` (a claim's unused fleet rate tokens are given back only
after its jobs are registered).  An
orphan is handed back counted, so no attempt comes back uncounted forever
(see :func:`~awa_django.domain.closures.handed_back`).
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable, Collection, Sequence

from ...domain.closures import handed_back
from ...domain.descriptors import Declared
from ...domain.records import ClaimedJob, OpenReceipt
from ...storage import AsyncRunner, descriptors, leases, runtimes
from ...storage.attempts import close_attempts, closed_attempts, orphaned_receipts
from ..config import PeriodicConfig
from ..service import PeriodicService
from .inflight import Inflight, nothing_inflight
from .leases import is_leased

log = logging.getLogger("awa_django.worker")


class Heartbeat(PeriodicService[dict[str, int]]):
    name = "heartbeat"
    # A failed tick means the database was unreachable; retry every second,
    # so that once the worker reconnects it learns within a second which of
    # its running attempts a crash reverted (instead of a whole interval on).
    retry_interval = 1.0

    def __init__(
        self,
        config: PeriodicConfig,
        runner: AsyncRunner,
        runtime_id: uuid.UUID,
        inflight: Inflight = nothing_inflight,
        declared: Declared | None = None,
        claiming: Callable[[], Collection[int]] = frozenset,
        connection_mode: str = "direct",
    ) -> None:
        super().__init__(config)
        self.connection_mode = connection_mode
        self._run = runner
        self.runtime_id = runtime_id
        self._inflight = inflight
        self._claiming = claiming
        self._declared = declared
        self._registered: tuple[list[str], int] | None = None

    async def register(self, queues: Sequence[str], pid: int, *, publish: bool = True) -> None:
        """Insert this runtime's row, then (``publish``) its descriptors; a
        worker publishes them later, beside its first claims."""
        role = "worker" if queues else "maintenance"
        await self._run(
            runtimes.register(
                self.runtime_id, socket.gethostname(), pid, queues, role, self.connection_mode
            )
        )
        self._registered = (list(queues), pid)
        if publish:
            await self.publish()

    async def publish(self) -> None:
        if self._declared is not None:
            await self._run(descriptors.sync(self.runtime_id, self._declared))

    async def unregister(self) -> None:
        await self._run(runtimes.unregister(self.runtime_id))

    async def run_once(self) -> dict[str, int]:
        """Refresh the heartbeat, cancel attempts closed elsewhere, hand back
        orphaned receipts; returns how many of each."""
        running = {_key(job): (job, ctx) for job, ctx in self._inflight()}
        if not await self._run(runtimes.heartbeat(self.runtime_id)) and self._registered:
            log.warning(
                "runtime %s had no row any more (removed after a long silence): registering",
                self.runtime_id,
            )
            await self.register(*self._registered)
        await self.publish()
        leased = [job for job, ctx in running.values() if is_leased(ctx)]
        if leased:
            await self._run(leases.heartbeat(self.runtime_id, leased))
        closed = await self._run(closed_attempts([job for job, _ in running.values()]))
        # An attempt that finished normally since the snapshot above is closed
        # too, by its own completion: only those still running were closed
        # by someone else.
        still = {_key(job) for job, _ in self._inflight()}
        for key in closed & still:
            job, ctx = running[key]
            if not ctx.is_cancelled():
                log.warning(
                    "job %s attempt %s was closed elsewhere; cancelling it", job.job_id, job.attempt
                )
                ctx.cancel()
        receipts = await self._run(orphaned_receipts(self.runtime_id, self.config.interval))
        # Claims still on their way first, then the in-flight set again (a
        # claim may have landed meanwhile): no await between the two reads.
        claiming = self._claiming()
        held = {_key(job) for job, _ in self._inflight()} | running.keys()
        orphans = [r for r in receipts if _key(r) not in held and r.claim_nonce not in claiming]
        handed = 0
        if orphans:
            # Counted: an attempt dropped by its runtime must not come back
            # uncounted forever (see closures.handed_back).
            won = await self._run(close_attempts([handed_back(r, counted=True) for r in orphans]))
            handed = len(won)
            log.warning("handed back %s orphaned receipts of this runtime", handed)
        return {"cancelled": len(closed & still), "handed_back": handed}


def _key(attempt: ClaimedJob | OpenReceipt) -> tuple[int, int, int | None]:
    """Who an attempt is: its run_lease and the nonce of the claim that made it."""
    return (attempt.job_id, attempt.run_lease, attempt.claim_nonce)
