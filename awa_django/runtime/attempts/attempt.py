"""The attempt state machine: what one run of a handler becomes.

Three drivers run handlers, each its own way, and hand what happened to
this module, which alone decides the attempt's end:

* the worker's loop (:meth:`~.executor.Executor.run`): async handlers, and
  the sync ones of a long-running queue or ``atomic=True``;
* the handler threads' result path (the dispatcher's
  ``_thread_finished``): a plain function's value or exception, taken on
  the loop with no coroutine and no task of its own;
* ``awa_django.testing.drain``, synchronously, in the test's thread.

The transitions, in order::

    claimed -- no handler can run it ---------------> failed / DLQ   (definition_for)
    [loop, long-running: the lease's heartbeat says Cancel -> cancelled]
    handler returned a value -----------------------> completed
    atomic handler closed itself in its transaction -> that Settled, as is
    handler raised an Exception --------------------> raised(): retryable,
                                                      snoozed, cancelled,
                                                      failed or DLQ
    handler raised WaitForCallback, with a lease ----> parked (None), or
                                                      not_parked, or
                                                      cancelled (the lease
                                                      said Cancel)
    handler raised WaitForCallback, no lease --------> not_parked (via raised())
    handler raised a BaseException -----------------> it propagates
    then every closure: the attempt's progress (a completion clears it);
    a callback registration still settling is awaited; marked ``leased``
    when the attempt escalated to a lease (the lease ring closes it then)

:func:`step` is all of it but the two transitions that wait on the
database -- parking on the lease, and a registration an async handler
started without awaiting it.  It is a plain function, so the thread path
closes nearly every attempt with no coroutine, and the loop's eager tasks
finish an attempt whose handler never waited on their first step.  When
one of the two applies it answers :class:`MustWait`, and the driver awaits
:func:`finish` (in a task of the attempt's own).  Only an attempt with an
:class:`~.leases.AttemptLease` can wait; ``drain()``'s contexts have none,
so for drain :func:`step` always decides.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any

from ...context import JobContext
from ...domain.closures import (
    cancelled,
    completed,
    error_entry,
    failed,
    handed_back_past_limit,
    is_sealed_job,
    not_parked,
    raised,
)
from ...domain.records import COMPLETED, ClaimedJob, Closure
from ...exceptions import InvalidJob
from ...jobs import Job, registry
from ...outcomes import Cancel, WaitForCallback
from ..completion.leases import AttemptLease
from .atomic import Settled

log = logging.getLogger("awa_django.worker")


class MustWait:
    """What :func:`step` answers for an attempt whose end needs something
    awaited first (parking on its lease, or a registration still settling):
    the driver then awaits :func:`finish` with the same arguments."""


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
    if is_sealed_job(job):  # checked once opened, on the handler's side (call_handler)
        return definition
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


def step(
    job: ClaimedJob,
    ctx: JobContext,
    value: Any,
    error: BaseException | None,
    *,
    dlq: bool,
) -> Closure | Settled | type[MustWait]:
    """The end of an attempt whose handler returned ``value`` (``error``
    None) or raised ``error``, decided without waiting: its closure, the
    :class:`Settled` close an atomic handler made itself (its ``value``),
    or :class:`MustWait`.  ``dlq``: whether a terminal failure of this job
    goes to the DLQ (``Job.dlq_for``).  A ``BaseException`` that is not an
    ``Exception`` is raised again."""
    if error is None and type(value) is Settled:
        return value
    lease = ctx._control
    if isinstance(lease, AttemptLease) and (lease.pending or isinstance(error, WaitForCallback)):
        return MustWait
    return _rounded_off(_closure_of(job, value, error, dlq), ctx, lease)


async def finish(
    job: ClaimedJob,
    ctx: JobContext,
    value: Any,
    error: BaseException | None,
    *,
    dlq: bool,
) -> Closure | None:
    """:func:`step`'s end of an attempt it answered :class:`MustWait` for,
    with the waits done: None when the attempt parked on its lease (nothing
    to write: the lease holds it), else its closure."""
    lease = ctx._control
    if isinstance(error, WaitForCallback) and isinstance(lease, AttemptLease):
        try:
            if await lease.park():
                return None
            closure = not_parked(job, dlq=dlq)
        except Cancel as exc:
            closure = cancelled(job, exc.reason)
    else:
        closure = _closure_of(job, value, error, dlq)
    if isinstance(lease, AttemptLease) and lease.pending:
        # A registration an async handler started without awaiting it
        # decides which path closes the attempt: wait for it.
        with contextlib.suppress(Cancel):
            await lease.settled()
    return _rounded_off(closure, ctx, lease)


def _closure_of(job: ClaimedJob, value: Any, error: BaseException | None, dlq: bool) -> Closure:
    if error is None:
        log.debug("job %s (%s) attempt %s completed", job.job_id, job.kind, job.attempt)
        return completed(job, value)
    if isinstance(error, Exception):
        return raised(job, error, dlq=dlq)
    raise error


def _rounded_off(closure: Closure, ctx: JobContext, lease: object) -> Closure:
    """``closure`` with what every closure carries: the attempt's last
    progress (a completion clears it), and ``leased`` when the attempt
    escalated to a lease."""
    if closure.target != COMPLETED:
        closure = replace(closure, progress=ctx.progress_snapshot()[1])
    if isinstance(lease, AttemptLease) and lease.leased:
        closure = replace(closure, leased=True)
    return closure
