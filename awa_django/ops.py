"""Operator API: read and steer jobs from code, commands and the admin.

Every function takes ``database=`` (default ``AWA["DATABASE"]``) and runs
its storage operation on Django's connection for it, so it joins the
caller's transaction.  Async twins carry Django's ``a`` prefix.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async

from .exceptions import InvalidJob
from .payload import check_queue
from .records import JOB_STATES, JobInfo
from .storage import jobs as job_store
from .storage.base import run


def get_job(job_id: int, *, database: str | None = None) -> JobInfo | None:
    """The job with this id in whatever state it is, or None."""
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise InvalidJob(f"job id must be an integer, got {job_id!r}")
    return run(job_store.get_job(job_id), database)


def list_jobs(
    *,
    queue: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    database: str | None = None,
) -> list[JobInfo]:
    """Jobs matching every given filter, oldest id first, at most ``limit``."""
    if queue is not None:
        check_queue(queue)
    if state is not None and state not in JOB_STATES:
        raise InvalidJob(f"unknown state {state!r}; states: {', '.join(JOB_STATES)}")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidJob(f"limit must be a positive integer, got {limit!r}")
    return run(job_store.list_jobs(queue=queue, state=state, kind=kind, limit=limit), database)


def queue_counts(queue: str, *, database: str | None = None) -> dict[str, int]:
    """Number of jobs of ``queue`` in each state (every state key present)."""
    return run(job_store.queue_counts(check_queue(queue)), database)


aget_job = sync_to_async(get_job)
alist_jobs = sync_to_async(list_jobs)
aqueue_counts = sync_to_async(queue_counts)
