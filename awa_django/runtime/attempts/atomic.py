"""Atomic handlers: a sync handler, its ORM writes and its completion in one transaction.

``@job(atomic=True)`` moves the close of a successful attempt out of the
batching completer and into the handler's own transaction.  On the handler
thread, :func:`close_in_transaction` opens ``transaction.atomic()`` on that thread's
Django connection for the job's database (the worker's ``--database``, by
default ``AWA["DATABASE"]``), calls the handler, and, when it returns,
writes the attempt's closure before the block commits: a receipt through
``awa.complete_receipt``, the run_lease guard of ``awa.close_attempts``
for one item, a leased attempt through ``awa.close_leases`` as the
completer closes it.  So:

* the handler's writes, the jobs it enqueued on that connection and the
  terminal row commit together, or none of them does;
* the run_lease guard is evaluated inside the transaction.  The close
  shares the lock of the attempt's claim batch (or locks its lease) and
  finds the attempt already closed when a rescue, a cancel or a shutdown
  hand-back got there first: it then reports the attempt stale, and
  :func:`close_in_transaction` raises inside the block so the whole
  transaction -- the handler's writes included -- rolls back.  The attempt
  is counted as a stale completion, as a late plain completion is.  A
  rescuer that comes after the close waits on the batch lock until the
  transaction ends and then sees the closure: the two never both win.
  Atomic closes of other items of the same batch share that lock, so they
  commit side by side instead of one after the other;
* a worker killed during the handler leaves an uncommitted transaction that
  PostgreSQL rolls back when the connection drops; the attempt is rescued
  like any other and the next attempt starts from the committed state.

Only a return is written inside the transaction.  Any exception the handler
raises (``RetryAfter``, ``Snooze``, ``Cancel``, ``TerminalError``,
``WaitForCallback`` or an error) leaves the block first, so its writes are
rolled back -- the job did not complete -- and the outcome then goes
through the ordinary path: the closure is built by :mod:`.closures` and
written by the completer on the worker's own connection.  An error raised
by the close or the commit (a deferred constraint, a serialization failure,
a lost connection) is treated the same way: a retryable failure of the
attempt, whose closure the guard rejects as stale in the rare case the
commit did land.

What an atomic job costs: each completion is its own commit on the
handler's connection (and its own evidence row) instead of a share of a
batched close, and the transaction stays open for as long as the handler
runs.  A long atomic handler therefore holds its locks (the lane of each
job it enqueued, the rows it wrote) and its snapshot until it returns, and
while it holds a snapshot the maintenance leader will not prune a ring slot
sealed after the transaction began (``awa.ring_slot_pinned``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction

from ...context import JobContext
from ...domain.closures import completed
from ...domain.records import ClaimedJob, Closure
from ...jobs import Job
from ...storage.attempts import complete_in_transaction
from ...storage.base import run
from ...storage.connection import alias_for
from ..completion.leases import is_leased
from .handlers import call_handler


@dataclass(frozen=True, slots=True)
class Settled:
    """A closure already written (or rejected) inside the handler's transaction.

    ``applied`` False: the attempt had been closed by someone else, and the
    transaction rolled back.
    """

    closure: Closure
    applied: bool


class _StaleAttemptError(Exception):
    """Raised inside the block to roll it back when the guard rejected the close."""


def close_in_transaction(
    definition: Job[..., Any],
    ctx: JobContext,
    job: ClaimedJob,
    database: str | None,
) -> Settled:
    """Call the handler and close its attempt in one transaction on Django's
    connection for ``database`` (default ``AWA["DATABASE"]``).

    Returns the :class:`Settled` completion (committed, or rolled back as
    stale); an exception of the handler, the close or the commit propagates
    after the rollback.
    """
    alias = alias_for(database)
    try:
        with transaction.atomic(using=alias):
            value = call_handler(definition, ctx, job)
            closure = completed(job, value)
            if is_leased(ctx):
                closure = replace(closure, leased=True)
            if not run(complete_in_transaction(closure), alias):
                raise _StaleAttemptError
    except _StaleAttemptError:
        return Settled(closure, applied=False)
    return Settled(closure, applied=True)
