"""The dead-letter queue: list, count, retry and purge dead-lettered jobs.

A job lands here when it exhausts its attempts (or fails terminally) on a
queue with the DLQ enabled, or when an operator moves a failed job in.
One job at a time (:func:`dlq_retry`, :func:`dlq_purge`) or every job
matching a filter, in batches of short transactions (:func:`dlq_retry_all`,
:func:`dlq_purge_all`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from asgiref.sync import sync_to_async

from ..conf import awa_settings
from ..domain.payload import check_priority, check_queue, check_run_at
from ..domain.records import DlqEntry
from ..exceptions import InvalidJob, JobNotFound
from ..storage import dlq as dlq_store
from ..storage.base import run
from .arguments import check_id, check_limit, check_text
from .audit import Action, audited


def dlq_list(
    *,
    queue: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    database: str | None = None,
) -> list[DlqEntry]:
    """Dead-letter entries matching every given filter, most recently moved first."""
    if queue is not None:
        check_queue(queue)
    check_text(kind, "kind")
    return run(dlq_store.dlq_list(queue=queue, kind=kind, limit=check_limit(limit)), database)


def dlq_count(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    database: str | None = None,
) -> int:
    """How many dead-lettered jobs match every given filter (``moved_before``:
    moved to the DLQ before that time)."""
    chosen = _dlq_filter(queue, kind, moved_before, None)
    return run(
        dlq_store.count(queue=queue, kind=kind, moved_before=chosen["moved_before"]), database
    )


def dlq_retry(
    job_id: int,
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
    actor: str | None = None,
    database: str | None = None,
) -> None:
    """Run a dead-lettered job again, optionally on another queue or priority.

    Without ``run_at`` (or with one that is not in the future) the job is
    ``available`` as the call returns, and idle workers of its queue are woken;
    with a future ``run_at`` it is ``scheduled`` for then.  The job keeps its
    id, arguments and error history; its attempt count and run_lease start
    again from zero.  Raises ``JobNotFound`` when the job is not in the DLQ.
    ``actor``: who asked, for the audit log.
    """
    job_id = check_id(job_id)
    to_queue = None if queue is None else check_queue(queue)
    to_priority = None if priority is None else check_priority(priority)
    when = check_run_at(run_at)
    with audited(
        actor,
        "dlq_retry",
        f"job {job_id}",
        job_ids=[job_id],
        detail={"queue": to_queue, "priority": to_priority, "run_at": when},
        database=database,
    ) as action:
        moved = run(
            dlq_store.retry([job_id], queue=to_queue, priority=to_priority, run_at=when),
            database,
        )
        if not moved:
            raise JobNotFound(f"job {job_id} is not in the dead-letter queue")
        action.done(1)


def dlq_purge(job_id: int, *, actor: str | None = None, database: str | None = None) -> None:
    """Delete a dead-lettered job for good; ``JobNotFound`` when it is not in the DLQ."""
    job_id = check_id(job_id)
    with audited(
        actor, "dlq_purge", f"job {job_id}", job_ids=[job_id], database=database
    ) as action:
        if not run(dlq_store.purge([job_id]), database):
            raise JobNotFound(f"job {job_id} is not in the dead-letter queue")
        action.done(1)


def _dlq_filter(
    queue: str | None, kind: str | None, moved_before: dt.datetime | None, batch_size: int | None
) -> dict[str, Any]:
    if queue is not None:
        check_queue(queue)
    check_text(kind, "kind")
    if moved_before is not None and (
        not isinstance(moved_before, dt.datetime) or moved_before.tzinfo is None
    ):
        raise InvalidJob(f"moved_before must be an aware datetime, got {moved_before!r}")
    size = awa_settings().cleanup_batch_size if batch_size is None else check_limit(batch_size)
    return {"queue": queue, "kind": kind, "moved_before": moved_before, "batch_size": size}


def dlq_retry_all(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    to_queue: str | None = None,
    to_priority: int | None = None,
    run_at: dt.datetime | None = None,
    batch_size: int | None = None,
    actor: str | None = None,
    database: str | None = None,
) -> int:
    """Retry every dead-lettered job matching the filters; returns how many.

    Each job is available at once, or scheduled for a future ``run_at``, as
    with :func:`dlq_retry`.  Works in batches of ``batch_size`` (default
    ``CLEANUP_BATCH_SIZE``), each its own short transaction outside
    ``atomic()``.  With an ``actor``, one audit entry records the filter and
    the total.
    """
    chosen = _dlq_filter(queue, kind, moved_before, batch_size)
    to_queue = None if to_queue is None else check_queue(to_queue)
    to_priority = None if to_priority is None else check_priority(to_priority)
    when = check_run_at(run_at)
    with _audited_filter(actor, "dlq_retry_all", chosen, database) as action:
        action.detail.update(to_queue=to_queue, to_priority=to_priority, run_at=when)
        count = run(
            dlq_store.retry_matching(
                **chosen, to_queue=to_queue, to_priority=to_priority, run_at=when
            ),
            database,
        )
        action.done(count)
    return count


def dlq_purge_all(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    batch_size: int | None = None,
    actor: str | None = None,
    database: str | None = None,
) -> int:
    """Purge every dead-lettered job matching the filters, in batches; returns how many."""
    chosen = _dlq_filter(queue, kind, moved_before, batch_size)
    with _audited_filter(actor, "dlq_purge_all", chosen, database) as action:
        count = run(dlq_store.purge_matching(**chosen), database)
        action.done(count)
    return count


def _audited_filter(
    actor: str | None, action: str, chosen: dict[str, Any], database: str | None
) -> contextlib.AbstractContextManager[Action]:
    """The audit of a bulk DLQ action: its filter is its target."""
    given = {k: v for k, v in chosen.items() if v is not None and k != "batch_size"}
    words = " ".join(f"{k}={v}" for k, v in given.items())
    return audited(
        actor,
        action,
        f"dlq where {words}" if words else "the whole dlq",
        queue=chosen["queue"],
        detail=given,
        database=database,
        batched=True,
    )


def move_failed_to_dlq(
    job_id: int,
    *,
    reason: str = "moved by an operator",
    actor: str | None = None,
    database: str | None = None,
) -> bool:
    """Move a failed job into the dead-letter queue; False when it is not failed.

    Unknown ids raise ``JobNotFound``.
    """
    job_id = check_id(job_id)
    with audited(
        actor,
        "move_failed_to_dlq",
        f"job {job_id}",
        job_ids=[job_id],
        detail={"reason": reason},
        database=database,
    ) as action:
        state = run(dlq_store.move_failed(job_id, reason), database)
        if state is None:
            raise JobNotFound(f"no job with id {job_id}")
        action.done(int(state == "moved"))
    return state == "moved"


adlq_list = sync_to_async(dlq_list)
adlq_count = sync_to_async(dlq_count)
adlq_retry = sync_to_async(dlq_retry)
adlq_purge = sync_to_async(dlq_purge)
adlq_retry_all = sync_to_async(dlq_retry_all)
adlq_purge_all = sync_to_async(dlq_purge_all)
amove_failed_to_dlq = sync_to_async(move_failed_to_dlq)
