"""``drain()``: run ready jobs inline, through the worker's own claim and close.

A test calls ``drain()`` instead of starting a worker.  Each pass claims
every ready job (of one queue, or of every queue with available jobs) with
the storage operation workers use (``storage.attempts.claim``), runs each
handler in the calling thread, and closes the attempt with the closure a
worker would write (``domain.closures``: completed, retryable with
backoff, snoozed, cancelled, failed or moved to the DLQ), one
``close_attempts`` per job.  Everything runs on Django's connection, so
inside a ``TestCase`` it sees (and leaves behind, until the rollback) the
test's own uncommitted jobs, and handlers' ORM writes join the same
transaction.  An ``atomic=True`` handler runs in a savepoint of it with its
close, as on a worker: when it raises, its writes are rolled back.

In outbox mode (``AWA["OUTBOX_DATABASE"]``) each pass first relays what
the outbox holds to the queue database, as ``manage.py awa_relay`` would.

Jobs the drained handlers enqueue are ready once the pass ends; with
``with_recursion`` (the default) the next pass runs them, until a pass
finds nothing.  Jobs that are scheduled or waiting for a retry are not
ready: they stay put unless a :class:`~awa_django.testing.FrozenClock` is
running, in which case each pass first promotes what is due by the frozen
time (the clock also dates the retries and snoozes drained jobs write, so
an attempt that fails in this pass is not due again before the clock moves).
Jobs waiting on dependencies (``using(depends_on=...)``) run in the pass
after the one that completed their last dependency: with no leader in a
test, the pass runs the leader's promotion itself once such a job is due.

A handler runs without a worker around it: ``ctx.register_callback``,
``ctx.heartbeat`` and the callback waits raise ``RuntimeError`` (a
retryable failure, like any exception), and nothing heartbeats, rescues
or enforces deadlines.  An exception that is not an ``Exception``
(``KeyboardInterrupt``, pytest's ``fail()``) propagates after the
attempts of the pass that had not closed are handed back (due again,
uncounted), as a worker does on shutdown.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import deque
from typing import Any, cast

from asgiref.sync import async_to_sync
from django.db import DatabaseError

from ..conf import AwaSettings, awa_settings
from ..domain import clock
from ..domain.closures import handed_back
from ..domain.payload import check_queue
from ..domain.records import DLQ, ClaimedJob, Closure
from ..domain.stripes import logical_queue, physical_queues
from ..runtime.attempts.atomic import Settled, close_in_transaction
from ..runtime.attempts.attempt import MustWait, definition_for, step
from ..runtime.attempts.executor import context_for
from ..runtime.attempts.handlers import call_handler
from ..runtime.relay import relay_all
from ..storage import testing as testing_store
from ..storage.attempts import claim, close_attempts
from ..storage.base import run

#: The runtime id drain's claims carry (no worker registers it).
DRAIN_RUNTIME_ID = uuid.UUID("00000000-0000-4000-8000-0000000d4a17")

#: The keys of the counts ``drain()`` returns, always all present.
OUTCOMES = ("completed", "retried", "snoozed", "cancelled", "failed", "dlq")

# How many jobs one claim statement asks for, and one promotion statement moves.
CLAIM_BATCH = 512
PROMOTE_BATCH = 1000

_LABELS = {
    "completed": "completed",
    "retryable": "retried",
    "snoozed": "snoozed",
    "cancelled": "cancelled",
    "failed": "failed",
}


def drain(
    queue: str | None = None,
    *,
    with_recursion: bool = True,
    limit: int | None = None,
    database: str | None = None,
) -> dict[str, int]:
    """Run ready jobs inline (see the module docstring) and count their outcomes.

    ``queue``: only that queue (default: every queue).  ``with_recursion``:
    also run the jobs the drained jobs enqueue (default); when False, only
    the jobs ready when ``drain`` started run.  ``limit``: run at most that
    many jobs.  Returns ``{"completed", "retried", "snoozed", "cancelled",
    "failed", "dlq": count}``: "retried" counts attempts that will run again
    later, "failed" and "dlq" jobs that failed for good.  A job whose
    attempt something else closed meanwhile (``ops.cancel_job`` from inside
    a handler) is not counted.
    """
    if queue is not None:
        check_queue(queue)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
    settings = awa_settings()
    counts = dict.fromkeys(OUTCOMES, 0)
    left = limit
    while left is None or left > 0:
        if database is None:
            relay_all()  # outbox mode: what the test's code enqueued reaches the queue first
        frozen = clock.frozen()
        if frozen is not None:
            run(testing_store.promote_until(frozen, queue, PROMOTE_BATCH), database)
        else:
            run(testing_store.promote_released(queue, PROMOTE_BATCH), database)
        batch = _claim_ready(queue, left, settings, database)
        if not batch:
            break
        _run_pass(batch, counts, settings, database)
        if left is not None:
            left -= len(batch)
        if not with_recursion:
            break
    return counts


def _claim_ready(
    queue: str | None, left: int | None, settings: AwaSettings, database: str | None
) -> list[ClaimedJob]:
    # Logical queue -> the physical queues (stripes) to claim it from.
    targets: dict[str, list[str]] = {}
    if queue is not None:
        targets[queue] = list(physical_queues(queue))
    else:
        for name in run(testing_store.queues_to_claim(), database):
            targets.setdefault(logical_queue(name), []).append(name)
    claimed: list[ClaimedJob] = []
    for name, stripes in targets.items():
        policy = settings.queue(name)
        while left is None or len(claimed) < left:
            wanted = CLAIM_BATCH if left is None else min(CLAIM_BATCH, left - len(claimed))
            jobs = run(
                claim(
                    name,
                    wanted,
                    DRAIN_RUNTIME_ID,
                    policy.deadline,
                    policy.priority_aging_interval,
                    stripes,
                ),
                database,
            )
            claimed.extend(jobs)
            if len(jobs) < wanted:
                break
    return claimed


def _run_pass(
    batch: list[ClaimedJob], counts: dict[str, int], settings: AwaSettings, database: str | None
) -> None:
    unclosed = deque(batch)
    try:
        while unclosed:
            job = unclosed[0]
            closure = _run_one(job, settings, database)
            if isinstance(closure, Settled):  # an atomic handler closed it itself
                won = {(job.job_id, job.run_lease)} if closure.applied else set()
                closure = closure.closure
            else:
                won = run(close_attempts([closure]), database)
            unclosed.popleft()
            if (job.job_id, job.run_lease) in won:
                counts[DLQ if closure.target == DLQ else _LABELS[closure.outcome]] += 1
    except BaseException:
        # The transaction may be unusable (the error came from the database):
        # then the test's rollback takes the open attempts with it.
        with contextlib.suppress(DatabaseError):
            run(close_attempts([handed_back(job) for job in unclosed]), database)
        raise


def _run_one(job: ClaimedJob, settings: AwaSettings, database: str | None) -> Closure | Settled:
    """Run ``job``'s handler here and now; its end is the worker's own
    (:func:`awa_django.runtime.attempts.attempt.step`)."""
    queue_dlq = settings.dlq_enabled(job.queue)
    definition = definition_for(job, dlq=queue_dlq)
    if isinstance(definition, Closure):
        return definition
    ctx = context_for(job)
    error: Exception | None = None
    try:
        if definition.atomic:
            value: Any = close_in_transaction(definition, ctx, job, database)
        else:
            value = call_handler(definition, ctx, job)
            if definition.is_async:
                value = async_to_sync(_awaited)(value)
    except Exception as exc:
        value, error = None, exc
    end = step(job, ctx, value, error, dlq=definition.dlq_for(job.metadata, queue_dlq))
    if end is MustWait:
        # Only an attempt with a lease waits (to park, or for a registration
        # to settle); a drained one has none: its context has no lease hub.
        raise RuntimeError(f"job {job.job_id}: a drained attempt cannot wait on a lease")
    return cast("Closure | Settled", end)


async def _awaited(coroutine: Any) -> Any:
    return await coroutine
