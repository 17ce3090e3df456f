"""Reading jobs through the ``awa.jobs`` view."""

from __future__ import annotations

import json
from typing import Any

from ..records import JOB_STATES, JobInfo
from ..sql import query
from .connection import django_connection


def _decode(text: str | None, default: Any = None) -> Any:
    return default if text is None else json.loads(text)


def _job_info(row: tuple) -> JobInfo:
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
        queue=queue,
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


def get_job(job_id: int, database: str | None = None) -> JobInfo | None:
    with django_connection(database).cursor() as cursor:
        cursor.execute(query("jobs", "get_job"), [job_id])
        row = cursor.fetchone()
    return None if row is None else _job_info(row)


def list_jobs(
    *,
    queue: str | None,
    state: str | None,
    kind: str | None,
    limit: int,
    database: str | None = None,
) -> list[JobInfo]:
    with django_connection(database).cursor() as cursor:
        cursor.execute(
            query("jobs", "list_jobs"),
            {"queue": queue, "state": state, "kind": kind, "limit": limit},
        )
        return [_job_info(row) for row in cursor.fetchall()]


def queue_counts(queue: str, database: str | None = None) -> dict[str, int]:
    counts = dict.fromkeys(JOB_STATES, 0)
    with django_connection(database).cursor() as cursor:
        cursor.execute(query("jobs", "queue_counts"), {"queue": queue})
        for state, count in cursor.fetchall():
            counts[state] = count
    return counts
