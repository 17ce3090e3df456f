"""Running one claimed attempt and turning what happened into a closure.

Async handlers run on the event loop.  Sync handlers (the Django norm, using
the ORM) run in a thread pool sized by the worker's permits, wrapped in
``close_old_connections()`` like a request, so a broken or aged connection
never leaks from one job into the next.

What each outcome becomes is the pure mapping in :mod:`.closures`.  A kind
this process does not know, or arguments that no longer fit the handler,
fail terminally.  An ``atomic=True`` handler closes a successful attempt
itself, inside its own transaction (:mod:`.atomic`): :meth:`Executor.run`
then returns the :class:`~.atomic.Settled` result instead of a closure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar, cast

from django.db import close_old_connections

from ..context import JobContext
from ..domain.closures import (
    cancelled,
    completed,
    error_entry,
    failed,
    handed_back_past_limit,
    not_parked,
    raised,
)
from ..domain.records import COMPLETED, ClaimedJob, Closure
from ..exceptions import InvalidJob
from ..jobs import Job, registry
from ..observability.hooks import observers
from ..outcomes import Cancel, WaitForCallback
from .atomic import Settled, close_in_transaction
from .handlers import call_handler
from .leases import AttemptLease, LeaseHub
from .threads import HandlerThreads, ResultSink

log = logging.getLogger("awa_django.worker")


class Executor:
    """Runs handlers; owns the thread pool for sync jobs."""

    def __init__(self, threads: int, database: str | None = None) -> None:
        self._threads = HandlerThreads(threads)
        # The Django alias of the worker's database: atomic handlers' transactions.
        self._database = database

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
        the caller looked it up already (:func:`definition_for`).
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
        closure = await self._execute(definition, job, ctx, dlq=dlq)
        return await self._after(job, ctx, closure)

    @staticmethod
    def on_a_thread(definition: Job[..., Any]) -> bool:
        """Whether the handler runs on a handler thread with no more to it
        (a plain function, not ``atomic``): see :meth:`start_on_thread`."""
        return not definition.is_async and not definition.atomic

    def start_on_thread(
        self, definition: Job[..., Any], job: ClaimedJob, ctx: JobContext, result: ResultSink
    ) -> None:
        """Start a plain function's handler on a handler thread; its value or
        exception goes to ``result`` on the event loop, for
        :meth:`finish_thread`.  (What :meth:`run` does for such a handler,
        without a task or a future of its own: a claim of hundreds of short
        sync jobs hands each to a thread and takes their results back in
        bunches.)"""
        log.debug("job %s (%s) attempt %s starting", job.job_id, job.kind, job.attempt)
        self._threads.submit_to(result, _on_handler_thread, call_handler, definition, ctx, job)

    def finish_thread_at_once(
        self,
        definition: Job[..., Any],
        job: ClaimedJob,
        ctx: JobContext,
        value: Any,
        error: BaseException | None,
        *,
        dlq: bool,
    ) -> Closure | type[MustWait]:
        """The closure of an attempt :meth:`start_on_thread` ran, when it
        needs nothing awaited -- nearly every one: no coroutine, no task,
        the loop closes it with those that came back with it.  Returns
        :class:`MustWait` when it parked on a callback or a registration is
        still settling: then :meth:`finish_thread` it in a task."""
        lease = ctx._control
        if isinstance(error, WaitForCallback) or (
            isinstance(lease, AttemptLease) and lease.pending
        ):
            return MustWait
        closure = self._closure_of(job, value, error, definition.dlq_for(job.metadata, dlq))
        return _with_lease(with_progress(closure, ctx), lease)

    async def finish_thread(
        self,
        definition: Job[..., Any],
        job: ClaimedJob,
        ctx: JobContext,
        value: Any,
        error: BaseException | None,
        *,
        dlq: bool,
    ) -> Closure | None:
        """The closure of an attempt :meth:`start_on_thread` ran, given what
        the handler returned or raised (None when it parked).  It waits only
        for a callback to park on or a registration to settle."""
        dlq = definition.dlq_for(job.metadata, dlq)
        closure: Closure | None
        if isinstance(error, WaitForCallback):
            closure = await self._park(job, ctx, dlq=dlq)
        else:
            closure = self._closure_of(job, value, error, dlq)
        return cast("Closure | None", await self._after(job, ctx, closure))

    @staticmethod
    def _closure_of(job: ClaimedJob, value: Any, error: BaseException | None, dlq: bool) -> Closure:
        if error is None:
            log.debug("job %s (%s) attempt %s completed", job.job_id, job.kind, job.attempt)
            return completed(job, value)
        if isinstance(error, Exception):
            return raised(job, error, dlq=dlq)
        raise error

    @staticmethod
    async def _after(
        job: ClaimedJob, ctx: JobContext, closure: Closure | Settled | None
    ) -> Closure | Settled | None:
        """The handler's closure with the attempt's progress, routed through
        its lease when it escalated to one."""
        if closure is None or isinstance(closure, Settled):
            return closure
        closure = with_progress(closure, ctx)
        lease = ctx._control
        if isinstance(lease, AttemptLease) and lease.pending:
            # A registration an async handler started without awaiting it
            # decides which path closes the attempt: wait for it.
            with contextlib.suppress(Cancel):
                await lease.settled()
        return _with_lease(closure, lease)

    async def _execute(
        self, definition: Job[..., Any], job: ClaimedJob, ctx: JobContext, *, dlq: bool
    ) -> Closure | Settled | None:
        log.debug("job %s (%s) attempt %s starting", job.job_id, job.kind, job.attempt)
        try:
            if definition.atomic:
                atomic = partial(close_in_transaction, database=self._database)
                settled: Settled = await self._threads.submit(
                    _on_handler_thread, atomic, definition, ctx, job
                )
                return settled
            if definition.is_async:
                scope = observers.attempt_scope_or_none(job)
                if scope is None:
                    value = await self._call(definition, ctx, job)
                else:
                    with scope:
                        value = await self._call(definition, ctx, job)
            else:
                value = await self._threads.submit(
                    _on_handler_thread, call_handler, definition, ctx, job
                )
        except asyncio.CancelledError:
            raise
        except WaitForCallback:
            return await self._park(job, ctx, dlq=dlq)
        except Exception as exc:
            return raised(job, exc, dlq=dlq)
        log.debug("job %s (%s) attempt %s completed", job.job_id, job.kind, job.attempt)
        return completed(job, value)

    @staticmethod
    async def _park(job: ClaimedJob, ctx: JobContext, *, dlq: bool) -> Closure | None:
        lease = ctx._control
        try:
            if isinstance(lease, AttemptLease) and await lease.park():
                return None
        except Cancel as exc:
            return cancelled(job, exc.reason)
        return not_parked(job, dlq=dlq)

    @staticmethod
    async def _call(definition: Job[..., Any], ctx: JobContext, job: ClaimedJob) -> Any:
        return await call_handler(definition, ctx, job)


class MustWait:
    """What :meth:`Executor.finish_thread_at_once` answers for an attempt
    whose closure needs something awaited first."""


def _with_lease(closure: Closure, lease: object) -> Closure:
    """``closure`` marked ``leased`` when its attempt escalated to a lease
    (the lease ring closes it then, not the claim's receipt)."""
    if isinstance(lease, AttemptLease) and lease.leased:
        return replace(closure, leased=True)
    return closure


def definition_for(job: ClaimedJob, *, dlq: bool) -> Job[..., Any] | Closure:
    """The definition that runs ``job``, or the failed closure of an attempt
    none can run: a kind this process does not know (after importing the
    module the job names, see ``registry.find``), or arguments that no
    longer fit the handler -- or an orphaned receipt of the last attempt,
    handed back counted (see :func:`~awa_django.domain.closures.handed_back`: its count
    passes the limit).  A callback's ``retry`` also brings a last attempt
    back past the limit; that one runs, as a new attempt."""
    if job.attempt > job.max_attempts and handed_back_past_limit(job):
        message = f"handed back after its last attempt ({job.max_attempts})"
        log.error("job %s attempt %s: %s", job.job_id, job.attempt, message)
        return failed(job, error_entry(job, None, message), dlq=dlq, reason=message)
    definition = registry.find(job.kind, job.metadata)
    if definition is None:
        message = f"unknown job kind: {job.kind}"
        log.error("job %s attempt %s: %s", job.job_id, job.attempt, message)
        return failed(job, error_entry(job, None, message), dlq=dlq, reason=message)
    try:
        definition.check_arguments(tuple(job.args), job.kwargs)
    except InvalidJob as exc:
        log.error("job %s (%s): %s", job.job_id, job.kind, exc)
        return failed(
            job,
            error_entry(job, exc),
            dlq=definition.dlq_for(job.metadata, dlq),
            reason="arguments do not fit",
        )
    return definition


def with_progress(closure: Closure, ctx: JobContext) -> Closure:
    """``closure`` carrying the attempt's last progress (a completion clears it)."""
    if closure.target == COMPLETED:
        return closure
    return replace(closure, progress=ctx.progress_snapshot()[1])


T = TypeVar("T")


def _on_handler_thread(
    call: Callable[[Job[..., Any], JobContext, ClaimedJob], T],
    definition: Job[..., Any],
    ctx: JobContext,
    job: ClaimedJob,
) -> T:
    """``call`` (the handler, or an atomic handler with its close) on a
    handler thread, with Django's connection hygiene around it
    (``close_old_connections()``) and the attempt's telemetry scope."""
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
    the handler first escalates (see ``JobContext._escalation``)."""
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
        progress=job.progress,
        claim_nonce=job.claim_nonce,
        control_source=hub,
        control_job=job,
    )
