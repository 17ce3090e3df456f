"""Running one claimed attempt and turning what happened into a closure.

Async handlers run on the event loop.  Sync handlers (the Django norm, using
the ORM) run in a thread pool sized by the worker's permits, wrapped in
``close_old_connections()`` like a request, so a broken or aged connection
never leaks from one job into the next.

Outcome mapping (API.md): a return completes the job (the return value is
kept when JSON-able); ``RetryAfter``/``Snooze``/``Cancel``/``TerminalError``
steer it; any other exception is a retryable failure with backoff until
``max_attempts``.  Every failed attempt appends an error entry to the job's
history, which survives retries.  A kind this process does not know, or
arguments that no longer fit the handler, fail terminally.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import traceback
from dataclasses import replace
from typing import Any

from django.db import close_old_connections

from ..context import JobContext
from ..exceptions import InvalidJob
from ..jobs import Job, registry
from ..outcomes import Cancel, RetryAfter, Snooze, TerminalError
from ..payload import to_json
from ..storage.attempts import (
    CANCELLED,
    COMPLETED,
    DLQ,
    FAILED,
    RETRYABLE,
    SCHEDULED,
    ClaimedJob,
    Closure,
)
from .backoff import retry_delay
from .threads import HandlerThreads

log = logging.getLogger("awa_django.worker")

MAX_TRACEBACK_CHARS = 20_000


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def error_entry(job: ClaimedJob, exc: BaseException | None, message: str | None = None) -> dict:
    """One failed attempt, as kept in the job's error history."""
    if exc is None:
        kind, text, trace = "awa_django.Error", message or "", ""
    else:
        kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
        text = message or str(exc)
        trace = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
    return {
        "attempt": job.attempt,
        "type": kind,
        "message": text,
        "traceback": trace,
        "at": _now().isoformat(),
    }


def _history(job: ClaimedJob, entry: dict) -> str:
    return json.dumps([*job.errors, entry], default=str)


def _base(job: ClaimedJob, target: str, outcome: str, **fields: Any) -> Closure:
    return Closure(
        job_id=job.job_id,
        run_lease=job.run_lease,
        claim_slot=job.claim_slot,
        batch_id=job.batch_id,
        item=job.item,
        target=target,
        outcome=outcome,
        **fields,
    )


def completed(job: ClaimedJob, value: Any) -> Closure:
    result = None
    if value is not None:
        try:
            result = to_json(value, "return value")
        except InvalidJob:
            log.debug("job %s: return value of %s is not JSON; not kept", job.job_id, job.kind)
    return _base(job, COMPLETED, COMPLETED, result=result)


def failed(job: ClaimedJob, entry: dict, *, dlq: bool, reason: str) -> Closure:
    """Terminal failure: failed, or moved to the DLQ when the queue has one."""
    target = DLQ if dlq else FAILED
    return _base(job, target, FAILED, errors=_history(job, entry), reason=reason)


def retry_or_fail(job: ClaimedJob, entry: dict, delay: float | None, *, dlq: bool) -> Closure:
    if job.attempt >= job.max_attempts:
        return failed(job, entry, dlq=dlq, reason="max_attempts exhausted")
    if delay is None:
        delay = retry_delay(job.attempt)
    return _base(
        job,
        RETRYABLE,
        RETRYABLE,
        run_at=_now() + dt.timedelta(seconds=delay),
        attempt=job.attempt,
        errors=_history(job, entry),
    )


def snoozed(job: ClaimedJob, delay: float) -> Closure:
    # The next claim adds one to the stored count: store this attempt's
    # predecessor so the re-run sees the same attempt number.
    return _base(
        job,
        SCHEDULED,
        "snoozed",
        run_at=_now() + dt.timedelta(seconds=delay),
        attempt=job.attempt - 1,
    )


def handed_back(job: ClaimedJob) -> Closure:
    """Shutdown gave up on this attempt: run it again soon, uncounted."""
    return _base(job, SCHEDULED, "handed_back", run_at=_now(), attempt=job.attempt - 1)


def cancelled(job: ClaimedJob, reason: str) -> Closure:
    entry = error_entry(job, None, reason)
    entry["type"] = "awa_django.Cancel"
    return _base(job, CANCELLED, CANCELLED, errors=_history(job, entry), reason=reason)


class Executor:
    """Runs handlers; owns the thread pool for sync jobs."""

    def __init__(self, threads: int) -> None:
        self._threads = HandlerThreads(threads)

    def shutdown(self) -> None:
        self._threads.shutdown()

    async def run(self, job: ClaimedJob, ctx: JobContext, *, dlq: bool) -> Closure:
        definition = registry.get(job.kind)
        if definition is None:
            message = f"unknown job kind: {job.kind}"
            log.error("job %s attempt %s: %s", job.job_id, job.attempt, message)
            return failed(job, error_entry(job, None, message), dlq=dlq, reason=message)
        try:
            definition.check_arguments(tuple(job.args), job.kwargs)
        except InvalidJob as exc:
            log.error("job %s (%s): %s", job.job_id, job.kind, exc)
            return failed(job, error_entry(job, exc), dlq=dlq, reason="arguments do not fit")

        closure = await self._execute(definition, job, ctx, dlq=dlq)
        if closure.target != COMPLETED:
            closure = replace(closure, progress=ctx.progress_snapshot()[1])
        return closure

    async def _execute(self, definition: Job, job: ClaimedJob, ctx: JobContext, *, dlq: bool):
        log.debug("job %s (%s) attempt %s starting", job.job_id, job.kind, job.attempt)
        try:
            if definition.is_async:
                value = await self._call(definition, ctx, job)
            else:
                value = await self._threads.submit(_call_sync, definition, ctx, job)
        except asyncio.CancelledError:
            raise
        except Snooze as exc:
            return snoozed(job, exc.delay)
        except RetryAfter as exc:
            return retry_or_fail(job, error_entry(job, exc), exc.delay, dlq=dlq)
        except Cancel as exc:
            return cancelled(job, exc.reason)
        except TerminalError as exc:
            log.warning(
                "job %s (%s) attempt %s failed terminally: %s",
                job.job_id,
                job.kind,
                job.attempt,
                exc,
            )
            return failed(job, error_entry(job, exc), dlq=dlq, reason="terminal error")
        except Exception as exc:
            log.warning(
                "job %s (%s) attempt %s/%s raised %r",
                job.job_id,
                job.kind,
                job.attempt,
                job.max_attempts,
                exc,
            )
            return retry_or_fail(job, error_entry(job, exc), None, dlq=dlq)
        log.debug("job %s (%s) attempt %s completed", job.job_id, job.kind, job.attempt)
        return completed(job, value)

    @staticmethod
    async def _call(definition: Job, ctx: JobContext, job: ClaimedJob) -> Any:
        if definition.takes_context:
            return await definition.func(ctx, *job.args, **job.kwargs)
        return await definition.func(*job.args, **job.kwargs)


def _call_sync(definition: Job, ctx: JobContext, job: ClaimedJob) -> Any:
    close_old_connections()
    try:
        if definition.takes_context:
            return definition.func(ctx, *job.args, **job.kwargs)
        return definition.func(*job.args, **job.kwargs)
    finally:
        close_old_connections()


def context_for(job: ClaimedJob) -> JobContext:
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
    )
