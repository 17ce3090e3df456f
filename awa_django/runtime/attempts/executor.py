"""Running one claimed attempt: calling its handler where it belongs.

Async handlers run on the event loop.  Sync handlers (the Django norm, using
the ORM) run in a thread pool sized by the worker's permits, wrapped in
``close_old_connections()`` like a request, so a broken or aged connection
never leaks from one job into the next.

What the handler's return or exception becomes -- including a kind this
process does not know, or arguments that no longer fit the handler -- is
the attempt state machine in :mod:`.attempt`, which the handler threads'
result path and ``testing.drain`` drive too.  An ``atomic=True`` handler
closes a successful attempt itself, inside its own transaction
(:mod:`.atomic`): :meth:`Executor.run` then returns the
:class:`~.atomic.Settled` result instead of a closure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar, cast

from django.db import close_old_connections, connections

from ...context import JobContext
from ...domain import sealing
from ...domain.closures import cancelled, is_sealed_job
from ...domain.records import ClaimedJob, Closure
from ...jobs import Job
from ...observability.hooks import observers
from ...outcomes import Cancel
from ..completion.leases import AttemptLease, LeaseHub
from .atomic import Settled, close_in_transaction
from .attempt import MustWait, definition_for, finish, step
from .handlers import call_handler
from .threads import HandlerThreads, ResultSink

log = logging.getLogger("awa_django.worker")


class DatabaseSlots:
    """Django connections the sync handlers of this process may hold at once
    (``AWA["MAX_CONNECTIONS_PER_PROCESS"]``, :mod:`~awa_django.domain.connections`).

    A handler thread takes a slot before its handler runs and, when the
    handler returns, closes its Django connections and gives the slot back,
    so idle threads hold none.  A handler that finds every slot taken waits
    for one -- the job is delayed, never failed -- and the wait is logged
    once it passes :attr:`REPORT_AFTER` seconds.
    """

    REPORT_AFTER = 1.0

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = threading.BoundedSemaphore(size)
        #: Handlers that waited longer than REPORT_AFTER for a slot, ever.
        self.waits = 0

    @contextlib.contextmanager
    def held(self, job: ClaimedJob) -> Iterator[None]:
        if not self._free.acquire(timeout=self.REPORT_AFTER):
            self.waits += 1
            log.warning(
                "job %s waits for a database connection: this process's %s handler connections "
                "(MAX_CONNECTIONS_PER_PROCESS) are all in use",
                job.job_id,
                self.size,
            )
            self._free.acquire()
        try:
            yield
        finally:
            connections.close_all()  # this thread's: Django's connections are per thread
            self._free.release()


class Executor:
    """Runs handlers; owns the thread pool for sync jobs."""

    def __init__(
        self, threads: int, database: str | None = None, db_slots: int | None = None
    ) -> None:
        self._threads = HandlerThreads(threads)
        # The Django alias of the worker's database: atomic handlers' transactions.
        self._database = database
        # Under MAX_CONNECTIONS_PER_PROCESS: the handler threads' connections.
        self.slots = DatabaseSlots(db_slots) if db_slots is not None else None

    def shutdown(self) -> None:
        self._threads.shutdown()

    @property
    def threads(self) -> int:
        """How many sync handlers may run at once."""
        return self._threads.size

    def resize(self, threads: int) -> None:
        """Allow ``threads`` sync handlers at once (a live ``max_workers`` change).

        Threads start on demand; when the pool shrinks, threads already
        started stay (idle) until shutdown.
        """
        self._threads.size = max(threads, 1)

    async def run(
        self,
        job: ClaimedJob,
        ctx: JobContext,
        *,
        dlq: bool,
        long_running: bool = False,
        definition: Job[..., Any] | None = None,
    ) -> Closure | Settled | None:
        """Run the attempt; returns its closure, or None when it parked
        waiting for a callback (nothing to write: the lease holds it), or
        the :class:`Settled` completion an atomic handler already wrote.

        ``long_running`` (the queue's option) escalates the attempt to a
        lease before the handler starts.  ``definition``: the job's, when
        the caller looked it up already (:func:`~.attempt.definition_for`).
        """
        if definition is None:
            found = definition_for(job, dlq=dlq)
            if isinstance(found, Closure):
                return found
            definition = found
        dlq = definition.dlq_for(job.metadata, dlq)

        lease = ctx._escalation() if long_running else ctx._control
        if isinstance(lease, AttemptLease):
            try:
                await lease.aheartbeat()
            except Cancel as exc:
                return cancelled(job, exc.reason)
        log.debug("job %s (%s) attempt %s starting", job.job_id, job.kind, job.attempt)
        error: BaseException | None = None
        try:
            if definition.atomic:
                atomic = partial(close_in_transaction, database=self._database)
                value: Any = await self._threads.submit(
                    _on_handler_thread, atomic, definition, ctx, job, self.slots
                )
            elif definition.is_async:
                scope = observers.attempt_scope_or_none(job)
                if scope is None:
                    value = await call_handler(definition, ctx, job)
                else:
                    with scope:
                        value = await call_handler(definition, ctx, job)
            else:
                value = await self._threads.submit(
                    _on_handler_thread, call_handler, definition, ctx, job, self.slots
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            value, error = None, exc
        end = step(job, ctx, value, error, dlq=dlq)
        if end is MustWait:
            return await finish(job, ctx, value, error, dlq=dlq)
        return cast("Closure | Settled", end)

    @staticmethod
    def on_a_thread(definition: Job[..., Any]) -> bool:
        """Whether the handler runs on a handler thread with no more to it
        (a plain function, not ``atomic``): see :meth:`start_on_thread`."""
        return not definition.is_async and not definition.atomic

    def start_on_thread(
        self, definition: Job[..., Any], job: ClaimedJob, ctx: JobContext, result: ResultSink
    ) -> None:
        """Start a plain function's handler on a handler thread; its value or
        exception goes to ``result`` on the event loop, which ends the
        attempt with :func:`.attempt.step` (:func:`.attempt.finish` when it
        must wait).  (What :meth:`run` does for such a handler, without a
        task or a future of its own: a claim of hundreds of short sync jobs
        hands each to a thread and takes their results back in bunches.)"""
        log.debug("job %s (%s) attempt %s starting", job.job_id, job.kind, job.attempt)
        self._threads.submit_to(
            result, _on_handler_thread, call_handler, definition, ctx, job, self.slots
        )


T = TypeVar("T")


def _on_handler_thread(
    call: Callable[[Job[..., Any], JobContext, ClaimedJob], T],
    definition: Job[..., Any],
    ctx: JobContext,
    job: ClaimedJob,
    slots: DatabaseSlots | None = None,
) -> T:
    """``call`` (the handler, or an atomic handler with its close) on a
    handler thread, with Django's connection hygiene around it
    (``close_old_connections()``), a database slot when the process has a
    connection budget, and the attempt's telemetry scope."""
    with slots.held(job) if slots is not None else contextlib.nullcontext():
        close_old_connections()
        try:
            scope = observers.attempt_scope_or_none(job)
            if scope is not None:
                # Entered on the handler's thread: a span becomes the ambient
                # context of the handler's own spans there.
                with scope:
                    return call(definition, ctx, job)
            return call(definition, ctx, job)
        finally:
            close_old_connections()


def context_for(job: ClaimedJob, hub: LeaseHub | None = None) -> JobContext:
    """The context of ``job``'s attempt; its lease (``hub``) is built when
    the handler first escalates (see ``JobContext._escalation``).  A sealed
    job's progress is opened for the handler (None where this process has
    no key: the attempt then fails on its arguments)."""
    sealed = is_sealed_job(job)
    return JobContext(
        job_id=job.job_id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        run_lease=job.run_lease,
        priority=job.effective_priority,
        metadata=job.metadata,
        tags=job.tags,
        progress=sealing.open_or_none(job.progress) if sealed else job.progress,
        claim_nonce=job.claim_nonce,
        control_source=hub,
        control_job=job,
        sealed=sealed,
    )
