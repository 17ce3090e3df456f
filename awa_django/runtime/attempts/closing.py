"""The dispatcher's closing side: attempts that finished, and their permits.

A dispatcher hands the closures of attempts that finished together to the
completer as one group (:meth:`Closer._close_group`) and frees their
permits the moment it does, counting the closures not yet durable so that
its claim loops stop claiming while too many wait (``_unflushed``).  The
results of handler threads that came back together close together
(:meth:`Closer._flush_threads`); an attempt that had to wait closes as a
group of one once it is done (:meth:`Closer._finish`).  One that parked or
closed itself in its own transaction has nothing to hand over
(:meth:`Closer._kept`), and one that could not be run or closed is dropped
(:meth:`Closer._forget`).

However an attempt ended, :meth:`Closer._ended` is where it is accounted
for: it leaves the in-flight set, its permit and its concurrency slot come
back, a fallback the completer wrote instead of its closure stands for it,
observers hear of it, and the claim's :class:`ClaimBatch` cancels its
deadline timer once its last job is done.

Kept apart from :mod:`.dispatcher` (claim loops and starting attempts) so
each reads on its own; :class:`~.dispatcher.Dispatcher` is the one class
built on :class:`Closer`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, cast

from ...context import JobContext
from ...domain.concurrency import CONCURRENCY_KEY
from ...domain.records import ClaimedJob, Closure
from ...jobs import Job
from ...observability.hooks import observers
from ..completion.completer import Completer, Outcome, Replaced
from ..config import QueuePolicy
from .atomic import Settled
from .permits import Permits, SharedPermits

log = logging.getLogger("awa_django.worker")


class ClaimBatch:
    """The jobs of one claim, which share a deadline.

    One timer per claim tells the handlers still running when the deadline
    passes (the leader's deadline rescue closes the attempts themselves).
    The timer is cancelled as soon as the batch's last job finishes: a
    pending timer would keep every context of the batch alive until the
    deadline (300 s by default), so memory would grow with throughput.
    """

    __slots__ = ("contexts", "remaining", "timer")

    def __init__(self, contexts: list[JobContext]) -> None:
        self.contexts = contexts
        self.remaining = len(contexts)
        self.timer: asyncio.TimerHandle | None = None

    def expire(self) -> None:
        self.timer = None
        for ctx in self.contexts:
            ctx.cancel()

    def finished(self, count: int) -> None:
        self.remaining -= count
        if self.remaining <= 0:
            if self.timer is not None:
                self.timer.cancel()  # drops the handle's reference to this batch
                self.timer = None
            self.contexts = []


class _ThreadResults(Protocol):
    """Where a handler thread's result goes (the dispatcher, on its loop)."""

    def _thread_finished(
        self, attempt: _ThreadAttempt, value: Any, error: BaseException | None
    ) -> None: ...


class _ThreadAttempt:
    """A plain function's attempt on a handler thread: where the thread's
    result goes (a :class:`~.threads.ResultSink`), and ``done``, the future
    shutdown waits on, resolved once the attempt is closed or parked."""

    __slots__ = ("batch", "began", "ctx", "definition", "dispatcher", "done", "job")

    def __init__(
        self,
        dispatcher: _ThreadResults,
        job: ClaimedJob,
        ctx: JobContext,
        batch: ClaimBatch,
        definition: Job[..., Any],
        began: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.dispatcher = dispatcher
        self.job = job
        self.ctx = ctx
        self.batch = batch
        self.definition = definition
        self.began = began
        self.done: asyncio.Future[None] = loop.create_future()

    def cancelled(self) -> bool:
        # Shutdown gave up on it and handed it back: its late result (a
        # handler that returned once it saw ctx.is_cancelled()) is dropped.
        return self.done.cancelled()

    def set_result(self, value: Any, /) -> None:
        self.dispatcher._thread_finished(self, value, None)

    def set_exception(self, exception: BaseException, /) -> None:
        self.dispatcher._thread_finished(self, None, exception)

    def settle(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class Closer:
    """Closing and accounting for a dispatcher's finished attempts (a base of
    :class:`~.dispatcher.Dispatcher`, which sets these attributes)."""

    policy: QueuePolicy
    permits: Permits | SharedPermits
    inflight: dict[tuple[int, int, int], tuple[ClaimedJob, JobContext, asyncio.Future[None]]]
    _completer: Completer
    _unflushed: int
    _flushed: asyncio.Event
    _slot_freed: asyncio.Event
    _quiet: asyncio.Event
    _from_threads: list[tuple[_ThreadAttempt, Closure]]

    def _flush_threads(self) -> None:
        """Close, per claim, the thread results that came back together."""
        arrived, self._from_threads = self._from_threads, []
        groups: dict[int, list[tuple[_ThreadAttempt, Closure]]] = {}
        for attempt, closure in arrived:
            groups.setdefault(id(attempt.batch), []).append((attempt, closure))
        create_task = asyncio.get_running_loop().create_task
        for group in groups.values():
            first = group[0][0]
            create_task(
                self._close_group(
                    [(a.job, closure) for a, closure in group],
                    first.batch,
                    first.began,
                    [a for a, _ in group],
                )
            )

    async def _close_group(
        self,
        finished: list[tuple[ClaimedJob, Closure]],
        batch: ClaimBatch,
        began: float,
        attempts: list[_ThreadAttempt] | None = None,
    ) -> None:
        """Write the closures of attempts that finished together (or of one
        that finished on its own); their permits are free from the moment
        the closures are handed over."""
        count = len(finished)
        self.permits.release(count)
        self._unflushed += count
        try:
            outcomes = await self._completer.submit_group([closure for _, closure in finished])
        except asyncio.CancelledError:
            outcomes = []  # shutdown gave up waiting: the worker hands them back
        except Exception:
            log.exception(
                "%s attempts of queue %s: could not record their outcomes",
                count,
                self.policy.name,
            )
            outcomes = []
        finally:
            self._unflushed -= count
            self._flushed.set()
        self._ended(finished, outcomes, batch, began)
        for attempt in attempts or ():
            attempt.settle()

    def _ended(
        self,
        finished: Sequence[tuple[ClaimedJob, Closure | None]],
        outcomes: Sequence[Outcome],
        batch: ClaimBatch,
        began: float,
        *,
        release: int = 0,
    ) -> None:
        """The end of attempts of one claim, accounted for in this one place
        however they ended: each leaves the in-flight set, ``release``
        permits come back (those not freed when closures were handed over),
        and the claim's batch counts them done.  An attempt with an outcome
        (``outcomes[i]`` for ``finished[i]``; none when it was dropped or
        parked, or its write failed) frees its concurrency slot, is reported
        with the closure the database kept (a :class:`Replaced` one's
        fallback) and whether it applied."""
        inflight = self.inflight
        closes: list[tuple[ClaimedJob, Closure, bool]] = []
        for index, (job, closure) in enumerate(finished):
            inflight.pop((job.job_id, job.run_lease, job.claim_nonce), None)
            if index >= len(outcomes):
                continue
            outcome = outcomes[index]
            if isinstance(outcome, Exception):
                log.error(
                    "job %s (%s): could not record its outcome: %s", job.job_id, job.kind, outcome
                )
                continue
            if CONCURRENCY_KEY in job.metadata:
                self._slot_freed.set()
            if type(outcome) is Replaced:  # its fallback was written instead
                closes.append((job, outcome.closure, outcome.applied))
            else:
                closes.append((job, cast("Closure", closure), cast("bool", outcome)))
        if release:
            self.permits.release(release)
        if closes and observers.active:
            observers.closed_many(closes, time.perf_counter() - began)
        batch.finished(len(finished))
        if not inflight:
            self._quiet.set()

    def _kept(
        self, job: ClaimedJob, outcome: Settled | None, batch: ClaimBatch, began: float
    ) -> None:
        """The end of an attempt with nothing to hand over: it parked (None;
        the lease holds it, its permit is free) or closed itself (atomic)."""
        if outcome is None:
            if observers.active:
                observers.parked(job)
            self._forget(job, batch)
        else:
            applied = self._completer.settled(outcome)
            self._ended(((job, outcome.closure),), (applied,), batch, began, release=1)

    def _forget(self, job: ClaimedJob, batch: ClaimBatch) -> None:
        """The attempt is no longer this worker's, with nothing to account
        for (it parked, or could not be run or closed): drop it and free
        its permit."""
        self._ended(((job, None),), (), batch, 0.0, release=1)

    async def _finish(
        self,
        job: ClaimedJob,
        ctx: JobContext,
        batch: ClaimBatch,
        rest: Awaitable[Closure | Settled | None],
        began: float,
    ) -> None:
        """The rest of an attempt that had to wait, then its own close."""
        try:
            outcome = await rest
            if type(outcome) is Closure:
                await self._close_group([(job, outcome)], batch, began)
            else:
                self._kept(job, cast("Settled | None", outcome), batch, began)
            return
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("job %s (%s): could not record its outcome", job.job_id, job.kind)
        self._forget(job, batch)
