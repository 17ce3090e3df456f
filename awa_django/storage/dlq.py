"""Dead-letter queue operations (see ``sql/schema/dlq.sql``).

Retry and purge take job ids and return the ids they touched; the
``*_matching`` forms work through every entry matching a filter in bounded
batches, one transaction each in autocommit, so a bulk retry of a large DLQ
never holds one long transaction or many row locks at once.

A queue filter covers every stripe of a striped queue and entries carry the
logical queue name (:mod:`awa_django.domain.stripes`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from ..domain import stripes
from ..domain.records import DlqEntry
from .base import Execute, Row, Steps, int_array, operation, single


def _queues(queue: str | None) -> list[str] | None:
    return None if queue is None else list(stripes.physical_queues(queue))


def _entry(row: Row) -> DlqEntry:
    (
        job_id,
        kind,
        queue,
        priority,
        args,
        kwargs,
        metadata,
        tags,
        attempt,
        max_attempts,
        errors,
        progress,
        reason,
        created_at,
        run_at,
        attempted_at,
        moved_at,
    ) = row
    return DlqEntry(
        job_id=job_id,
        kind=kind,
        queue=stripes.logical_queue(queue),
        priority=priority,
        args=json.loads(args),
        kwargs=json.loads(kwargs),
        metadata=json.loads(metadata) if metadata else {},
        tags=list(tags or []),
        attempt=attempt,
        max_attempts=max_attempts,
        errors=json.loads(errors) if errors else [],
        progress=json.loads(progress) if progress else None,
        reason=reason,
        created_at=created_at,
        run_at=run_at,
        attempted_at=attempted_at,
        moved_at=moved_at,
    )


@operation
def dlq_list(
    *, queue: str | None = None, kind: str | None = None, limit: int = 100
) -> Steps[list[DlqEntry]]:
    """DLQ entries matching the filters, most recently moved first."""
    params = {"queues": _queues(queue), "kind": kind, "limit": limit}
    rows = yield Execute.named("dlq", "dlq_list", params)
    return [_entry(row) for row in rows]


@operation
def count(
    *, queue: str | None = None, kind: str | None = None, moved_before: dt.datetime | None = None
) -> Steps[int]:
    """How many DLQ entries match the filters."""
    params = {"queues": _queues(queue), "kind": kind, "moved_before": moved_before}
    return int(single((yield Execute.named("dlq", "dlq_count", params))))


def _retry_statement(
    queue: str | None, priority: int | None, run_at: dt.datetime | None
) -> tuple[str, list[object]]:
    """The named statement of a retry and its parameters after the ids: the
    three-argument ``awa.dlq_retry`` (ready now, the call 0.1.0 makes) unless
    a ``run_at`` is asked."""
    if run_at is None:
        return "dlq_retry", [queue, priority]
    return "dlq_retry_at", [queue, priority, run_at]


@operation
def retry(
    job_ids: Sequence[int],
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
) -> Steps[list[int]]:
    """Move these DLQ entries back into the queue, available at once (or
    scheduled for a future ``run_at``); returns the ids moved."""
    statement, extra = _retry_statement(queue, priority, run_at)
    rows = yield Execute.named("dlq", statement, [int_array(job_ids), *extra])
    return [job_id for (job_id,) in rows]


@operation
def purge(job_ids: Sequence[int]) -> Steps[list[int]]:
    """Delete these DLQ entries for good; returns the ids deleted."""
    rows = yield Execute.named("dlq", "dlq_purge", [int_array(job_ids)])
    return [job_id for (job_id,) in rows]


def _in_batches(
    queue: str | None,
    kind: str | None,
    moved_before: dt.datetime | None,
    batch_size: int,
    statement: str,
    extra: Sequence[object] = (),
) -> Steps[int]:
    """Pick matching entries ``batch_size`` at a time and apply ``statement``
    (``dlq_retry``, ``dlq_retry_at`` or ``dlq_purge``) to each batch; returns
    how many it touched."""
    total = 0
    for name in [None] if queue is None else stripes.physical_queues(queue):
        while True:
            chosen = [name, kind, moved_before, batch_size]
            ids = single((yield Execute.named("dlq", "dlq_select", chosen)))
            if not ids:
                break
            rows = yield Execute.named("dlq", statement, [int_array(ids), *extra])
            total += len(rows)
            if len(ids) < batch_size:
                break
    return total


@operation
def retry_matching(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    batch_size: int = 1000,
    to_queue: str | None = None,
    to_priority: int | None = None,
    run_at: dt.datetime | None = None,
) -> Steps[int]:
    """Retry every entry matching the filters, ``batch_size`` per statement; returns how many."""
    statement, extra = _retry_statement(to_queue, to_priority, run_at)
    return (yield from _in_batches(queue, kind, moved_before, batch_size, statement, extra))


@operation
def purge_matching(
    *,
    queue: str | None = None,
    kind: str | None = None,
    moved_before: dt.datetime | None = None,
    batch_size: int = 1000,
) -> Steps[int]:
    """Purge every entry matching the filters, ``batch_size`` per statement; returns how many."""
    return (yield from _in_batches(queue, kind, moved_before, batch_size, "dlq_purge"))


@operation
def move_failed(job_id: int, reason: str) -> Steps[str | None]:
    """Move a failed job into the DLQ; ``'moved'``, ``'already_<state>'`` or None (unknown)."""
    value = single((yield Execute.named("dlq", "move_failed_to_dlq", [job_id, reason])))
    return None if value is None else str(value)
