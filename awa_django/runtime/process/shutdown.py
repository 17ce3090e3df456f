"""How a worker process stops: bounded, and handing back only what still runs.

Shutdown (SIGTERM/SIGINT, or ``--burst`` finding nothing left):

1. dispatchers stop claiming (never mid-claim);
2. in-flight jobs get ``shutdown_timeout`` seconds to finish and complete;
   the completions of those that finished are then written (a slow flush
   may still hold them; each flush waits at most until half of
   ``STOP_GRACE`` past ``shutdown_timeout``), so none is handed back after
   its handler ran -- nor one that finished during that flush: an attempt
   whose closure is queued in the completer is written, not handed back;
3. whatever is still running is handed back: its context is cancelled and
   its attempt closed as ``handed_back`` into ``deferred_jobs`` due now and
   uncounted, so another worker runs it again (a late completion from the
   abandoned handler is then stale and rejected by the run_lease guard);
4. pending completions are flushed, the runtime row removed, the pool closed.

Steps 1-4 are bounded: with the database unreachable a claim waits for a
connection and a flush retries for as long as the connection is lost, but
a worker told to stop must stop.  ``shutdown_timeout + STOP_GRACE`` seconds
after the stop began, whatever is still waiting is abandoned and the
process exits 1: the attempts it could not close stay open in the database
and are rescued once its heartbeat is stale, like a killed worker's.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import psycopg

from ...domain.closures import handed_back
from ..attempts.dispatcher import Dispatcher
from ..completion.completer import BatchCompleter
from ..completion.leases import is_leased
from ..config import WorkerConfig

log = logging.getLogger("awa_django.worker")

# Seconds a stopping worker gives its database calls beyond shutdown_timeout
# (see the module docstring), and the removal of its runtime row.
STOP_GRACE = 10.0


class Shutdown:
    """Steps 1-4 above, for :class:`~.worker.Worker` (a base of it, which
    sets these attributes)."""

    config: WorkerConfig
    completer: BatchCompleter
    dispatchers: list[Dispatcher]
    handed_back: int

    @property
    def inflight(self) -> int:
        return sum(len(d.inflight) for d in self.dispatchers)

    async def _wind_down(self, dispatching: list[asyncio.Task[None]]) -> bool:
        """Steps 1-4 of the shutdown within their bound; False if it was hit."""
        budget = self.config.shutdown_timeout + STOP_GRACE
        try:
            await asyncio.wait_for(self._finish(dispatching), budget)
        except (TimeoutError, psycopg.Error) as exc:
            log.error(
                "could not finish stopping within %ss (%s; is the database reachable?); "
                "exiting with %s attempts open: they are rescued once this worker's heartbeat "
                "is stale",
                budget,
                exc.__class__.__name__,
                self.inflight,
            )
            return False
        return True

    async def _finish(self, dispatching: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*dispatching)
        await self._drain_inflight()
        await self.completer.stop()

    async def _drain_inflight(self) -> None:
        loop = asyncio.get_running_loop()
        # Completions may take half the grace beyond shutdown_timeout; the
        # hand-back and the completer's stop need the rest.
        flushed_by = loop.time() + self.config.shutdown_timeout + STOP_GRACE / 2
        tasks = [task for d in self.dispatchers for _, _, task in d.inflight.values()]
        if tasks:
            log.info(
                "waiting up to %ss for %s in-flight jobs", self.config.shutdown_timeout, len(tasks)
            )
            await asyncio.wait(tasks, timeout=self.config.shutdown_timeout)
        if self.completer.unwritten:
            # Attempts whose handlers finished are not unfinished: their
            # closures may still wait in the completer (a slow flush).  Write
            # them first, or a hand-back written before them would run a
            # finished job again (its completion then stale).
            log.info(
                "writing %s completions before handing back what still runs",
                self.completer.unwritten,
            )
            await self.completer.flush(max(flushed_by - loop.time(), 0.0))
        # A handler that finished during that flush has its closure queued
        # behind it, and is still in flight until it is written: not
        # unfinished either.  No await from here to the hand-back's submission.
        queued = self.completer.queued()
        leftovers = []
        finishing = 0
        for d in self.dispatchers:
            for entry in d.inflight.values():
                if (entry[0].job_id, entry[0].run_lease) in queued:
                    finishing += 1
                else:
                    leftovers.append(entry)
        if leftovers:
            for _job, ctx, task in leftovers:
                ctx.cancel()
                task.cancel()
            closures = [
                replace(
                    handed_back(job),
                    progress=ctx.progress_snapshot()[1],
                    leased=is_leased(ctx),
                )
                for job, ctx, _ in leftovers
            ]
            results = await self.completer.submit_many(closures)
            self.handed_back = sum(results)
            log.warning("handed back %s unfinished jobs", self.handed_back)
        if finishing:
            log.info("writing %s completions that arrived while flushing", finishing)
            await self.completer.flush(max(flushed_by - loop.time(), 0.0))
