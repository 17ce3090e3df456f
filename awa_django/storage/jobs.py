"""Reading jobs through the ``awa.jobs`` view (JSON columns arrive as text).

A queue filter covers every stripe of a striped queue
(:func:`awa_django.domain.stripes.physical_queues`), and the jobs read carry the
logical queue name.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..domain.records import JOB_STATES, JobInfo, JobPage
from ..domain.stripes import logical_queue, physical_queues
from .base import Execute, Row, Steps, operation


def _queues(queue: str | None) -> list[str] | None:
    """The physical queues a filter on logical ``queue`` reads (None: every queue)."""
    return None if queue is None else list(physical_queues(queue))


def _decode(text: str | None, default: Any = None) -> Any:
    return default if text is None else json.loads(text)


def job_info(row: Row) -> JobInfo:
    """One row of the ``get_job`` / ``list_jobs`` statements as a :class:`JobInfo`."""
    (
        job_id,
        kind,
        queue,
        priority,
        state,
        attempt,
        max_attempts,
        run_lease,
        args,
        kwargs,
        metadata,
        tags,
        errors,
        progress,
        return_value,
        created_at,
        run_at,
        attempted_at,
        finalized_at,
    ) = row
    return JobInfo(
        id=job_id,
        kind=kind,
        queue=logical_queue(queue),
        priority=priority,
        state=state,
        attempt=attempt,
        max_attempts=max_attempts,
        run_lease=run_lease,
        args=_decode(args, []),
        kwargs=_decode(kwargs, {}),
        metadata=_decode(metadata, {}),
        tags=list(tags or []),
        errors=_decode(errors, []),
        progress=_decode(progress),
        return_value=_decode(return_value),
        created_at=created_at,
        run_at=run_at,
        attempted_at=attempted_at,
        finalized_at=finalized_at,
    )


@operation
def get_job(job_id: int) -> Steps[JobInfo | None]:
    rows = yield Execute.named("jobs", "get_job", {"id": job_id})
    if not rows:
        return None
    info = job_info(rows[0])
    if info.state in ("running", "waiting_external"):
        callbacks = yield Execute.named("leases", "lease_callback", [job_id])
        if callbacks:
            info = dataclasses.replace(info, callback_id=callbacks[0][0])
    return info


@operation
def list_jobs(
    *,
    queue: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    limit: int = 100,
) -> Steps[list[JobInfo]]:
    """Jobs matching every given filter, oldest id first."""
    rows = yield Execute.named(
        "jobs",
        "list_jobs",
        {"queues": _queues(queue), "state": state, "kind": kind, "limit": limit},
    )
    return [job_info(row) for row in rows]


@operation
def job_page(
    *,
    before: int | None = None,
    floor: int | None = None,
    limit: int = 100,
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    priority: int | None = None,
    tag: str | None = None,
    args: str | None = None,
    kwargs: str | None = None,
) -> Steps[list[JobInfo]]:
    """Up to ``limit`` jobs matching every given filter, newest id first, with
    ids below ``before`` and not below ``floor`` (the search bound: a filter
    that matches few jobs reads the id range down to it, no further).
    ``args`` / ``kwargs`` are JSON text the job's arguments must contain
    (jsonb ``@>``)."""
    rows = yield Execute.named(
        "jobs",
        "job_page",
        {
            "before": before,
            "floor": floor,
            "limit": limit,
            "state": state,
            "queues": _queues(queue),
            "kind": kind,
            "priority": priority,
            "tag": tag,
            "args": args,
            "kwargs": kwargs,
        },
    )
    return [job_info(row) for row in rows]


@operation
def browse(
    *,
    before: int | None,
    scan: int,
    limit: int,
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    priority: int | None = None,
    tag: str | None = None,
    args: str | None = None,
    kwargs: str | None = None,
) -> Steps[JobPage]:
    """A page of :func:`job_page` that searches at most ``scan`` ids below
    ``before`` (None: from the newest job)."""
    if before is None:
        rows = yield Execute.named("jobs", "newest_job_id")
        before = int(rows[0][0]) + 1
    floor = max(before - scan, 1)
    jobs = yield from job_page(
        before=before,
        floor=floor,
        limit=limit,
        state=state,
        queue=queue,
        kind=kind,
        priority=priority,
        tag=tag,
        args=args,
        kwargs=kwargs,
    ).steps
    if len(jobs) == limit:
        older: int | None = jobs[-1].id
    else:
        older = floor if floor > 1 else None
    return JobPage(jobs=jobs, older=older, searched_from=before, searched_to=floor)


@operation
def job_states(queue: str) -> Steps[list[tuple[int, str]]]:
    """(id, state) of every job of ``queue`` the read view shows, by id."""
    rows = yield Execute.named("jobs", "job_states", {"queues": _queues(queue)})
    return [(job_id, state) for job_id, state in rows]


@operation
def queue_counts(queue: str) -> Steps[dict[str, int]]:
    """Jobs of ``queue`` per state (live rows plus the rollups of pruned ones),
    and under ``"paused"`` whether the queue is paused (a bool)."""
    counts: dict[str, int] = dict.fromkeys(JOB_STATES, 0)
    rows = yield Execute.named("jobs", "queue_counts", {"queues": _queues(queue)})
    for state, count in rows:
        counts[state] = count
    paused = yield Execute.named("queues", "queue_paused", {"queue": queue})
    counts["paused"] = bool(paused)
    return counts
